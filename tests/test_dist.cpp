// Many ranks on the CPU: tests/dist/dist_check under `mpirun -np 2` and `-np 4` (oversubscribed)
// against the single-rank run (loss, every gradient, the weights after AdamW steps, per-rank
// memory against the plan; --sweep layer against the chunk order's bits), and `oomb train`'s
// refusals and faults with several ranks.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <tuple>

#include "backend/backend.h"
#include "dist/nccl_comm.h"
#include "hf/checkpoint.h"
#include "hf/config.h"
#include "model/init.h"
#include "model/params.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {
#ifdef OOMB_MPIRUN
const char* kMpirun = OOMB_MPIRUN;
#else
const char* kMpirun = "";
#endif

// Why the tests cannot run here ("" when they can).
std::string missing() {
  if (std::string(kMpirun).empty()) return "this build found no MPI (install libopenmpi-dev and openmpi-bin)";
  if (!std::filesystem::exists(binary_dir() / "dist_check")) return "dist_check was not built";
  return "";
}

#define NEED_MPI()                                         \
  do {                                                     \
    if (!missing().empty()) OOMB_MISSING_REFERENCE(missing()); \
  } while (0)

// mpirun -np P prog args: every rank single-threaded (the ranks share the cores), root allowed
// (containers), oversubscribed (more ranks than cores).
// launch: what follows `mpirun --oversubscribe` (-np P prog args, or MPMD's `-np 1 a : -np 1 b`).
CmdResult mpirun_line(const std::string& launch, const std::string& env = "") {
  const auto dir = temp_dir("dist");
  const auto log = dir / "mpirun.log";
  const std::string cmd = fmt::format(
      "cd {} && {} OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
      // under make test-asan the ranks keep ASan's checks but not LeakSanitizer's: Open MPI keeps
      // allocations to exit in plugins it has unloaded by then, which no suppression can name
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 "
      "{} --oversubscribe {} > {} 2>&1", dir.string(), env, kMpirun, launch, log.string());
  const int rc = std::system(cmd.c_str());
  return {WEXITSTATUS(rc), read_text(log)};
}
// A shell command in dir, its output captured.
CmdResult run_cmd_in(const std::filesystem::path& dir, const std::string& cmd) {
  const auto log = dir / "cmd.log";
  const int rc = std::system(fmt::format("cd {} && {} > {} 2>&1", dir.string(), cmd, log.string()).c_str());
  return {WEXITSTATUS(rc), read_text(log)};
}
CmdResult mpirun(int np, const std::string& prog_and_args, const std::string& env = "") {
  return mpirun_line(fmt::format("-np {} {}", np, prog_and_args), env);
}

// The figure a dist_check line names ("name value (bound b)"), or -1 when absent.
double figure(const std::string& out, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("(^|\\n)" + name + " ([0-9.e+-]+)"))) return -1;
  return std::stod(m[2]);
}

// DIR/m (oomb init --preset tiny) and DIR/tokens.bin (4096 ids below the preset's 128) for the
// tests that run the oomb binary under mpirun.
bool tiny_model_and_tokens(const std::string& oomb, const std::filesystem::path& dir) {
  if (std::system(fmt::format("{} init --preset tiny --out {}/m > /dev/null", oomb, dir.string()).c_str()) != 0)
    return false;
  write_tokens(dir / "tokens.bin", 4096, 120, 5);
  return true;
}

CmdResult expect_equal_to_single_rank(int np, const std::string& args, const std::string& env = "") {
  const CmdResult r = mpirun(np, (binary_dir() / "dist_check").string() + " " + args, env);
  SCOPED_TRACE("mpirun -np " + std::to_string(np) + " dist_check " + args + "\n" + r.out);
  std::cout << "[np " << np << " " << args << "]\n" << r.out;
  EXPECT_EQ(r.code, 0);
  for (const char* f : {"loss_rel_err", "grad_rel_err", "train_loss_rel_err"}) {
    const double v = figure(r.out, f);
    EXPECT_GE(v, 0) << f << " missing";
    EXPECT_LE(v, 1e-6) << f;
  }
  // after AdamW steps (dist_check says why the bound is wider than the gradients')
  EXPECT_GE(figure(r.out, "weights_rel_err"), 0);
  EXPECT_LE(figure(r.out, "weights_rel_err"), 1e-4);
  EXPECT_EQ(figure(r.out, "plan_mismatches"), 0);
  EXPECT_EQ(figure(r.out, "kv_per_rank_vs_single_over_sp"), 0);
  return r;
}
}  // namespace

TEST(Dist, SequenceParallelTwoRanks) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--sp 2");
}

TEST(Dist, SequenceParallelFourRanksQwen3DocMaskOffload) {
  NEED_MPI();
  expect_equal_to_single_rank(4, "--sp 4 --kv-heads 4 --arch qwen3 --doc-mask --device sim --offload kv");
}

// --sp-head-chunks K: attention over each rank's heads in K groups of whole kv heads, through buffers
// of H/(P K) heads. Besides the single rank's run (within 1e-6, the plan equal to every rank's
// peaks), dist_check runs K = 1 on the same ranks: the same bits (the loss and every gradient of a
// step; every training step's loss and the weights after them), and its peaks minus K's equal to
// its plan minus K's for every (tier, tag). GQA (2 query heads per kv head, one kv head per group)
// on the CPU with --doc-mask; four groups; the layer order; 4 ranks on the CPU and on the
// simulated device with everything offloaded; Qwen3 (q/k norms) with the K/V pages offloaded;
// NCCL's code path (device staging, strided packs).
CmdResult expect_head_chunks_equal_to_one(int np, const std::string& args) {
  const CmdResult r = expect_equal_to_single_rank(np, args);
  SCOPED_TRACE(args + "\n" + r.out);
  EXPECT_EQ(figure(r.out, "head_chunks_vs_one_differing"), 0);
  EXPECT_EQ(figure(r.out, "head_chunks_vs_one_trained_differing"), 0);
  EXPECT_EQ(figure(r.out, "head_chunk_saving_vs_plan_mismatches"), 0);
  EXPECT_GT(figure(r.out, "head_chunk_saving_bytes"), 0);
  return r;
}

TEST(Dist, HeadChunksGiveTheBitsOfOneGroup) {
  NEED_MPI();
  // the attention side's buffers of one layer plan, K = 1 against K = 2 (computed here from the
  // shapes, not by the code under test): q, o, dq, dO (T, H/P, D), lse, run_sum (T, H/P), k, v, dk,
  // dv (T, G/P, D), fp32, every size a multiple of the arenas' 64 bytes; T = 64 tokens (the chunk),
  // H = 8, G = 4, D = 8, P = 2
  const int64_t T = 64, Ha = 8 / 2, Ga = 4 / 2, D = 8;
  const int64_t attention_side = 4 * (4 * T * Ha * D + 2 * T * Ha + 4 * T * Ga * D);
  const CmdResult r = expect_head_chunks_equal_to_one(2, "--sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --doc-mask");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("head_chunk_saving host/activations ([0-9]+)"))) << r.out;
  EXPECT_EQ(std::stoll(m[1]), attention_side / 2) << r.out;
  // the Ulysses staging: one group's t H D floats instead of all heads' (t = T / P)
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("head_chunk_saving host/workspace ([0-9]+)"))) << r.out;
  EXPECT_EQ(std::stoll(m[1]), 4 * (T / 2) * 8 * D / 2) << r.out;
  expect_head_chunks_equal_to_one(2, "--sp 2 --heads 8 --kv-heads 8 --sp-head-chunks 4");
  expect_head_chunks_equal_to_one(2, "--sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --sweep layer");
}

TEST(Dist, HeadChunksOffloadedOnFourRanksAndOverDeviceStaging) {
  NEED_MPI();
  expect_head_chunks_equal_to_one(4, "--sp 4 --heads 16 --kv-heads 8 --sp-head-chunks 2 --doc-mask");
  expect_head_chunks_equal_to_one(
      4, "--sp 4 --heads 8 --kv-heads 8 --sp-head-chunks 2 --doc-mask --device sim --offload kv,params");
  expect_head_chunks_equal_to_one(2, "--sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --arch qwen3 --device sim "
                                     "--offload kv");
  expect_head_chunks_equal_to_one(2, "--sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --device sim --comm sim-device");
}

// The negative control: the exchange back putting group j's rows in another group's columns is
// seen by the bitwise comparison (and by the single rank's).
TEST(Dist, HeadChunksCheckSeesAWrongGrouping) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() +
                                    " --sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --group-fault --steps 1");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_GT(figure(r.out, "head_chunks_vs_one_differing"), 0) << r.out;
  EXPECT_GT(figure(r.out, "grad_rel_err"), 1e-3) << r.out;
}

// A K that does not split each rank's kv heads, K > 1 on one rank, K < 1 and sparse attention are
// refused naming the flag and the numbers; oomb plan prints the groups and their saving.
TEST(Dist, HeadChunksRefusalsAndPlan) {
  NEED_MPI();
  const std::string oomb = (binary_dir() / "oomb").string();
  CmdResult r = mpirun(2, oomb + " train --steps 1 --seq-len 128 --sp 2 --sp-head-chunks 2");
  EXPECT_NE(r.code, 0);
  const std::string why = "--sp-head-chunks 2: each of the --sp 2 ranks attends with 1 kv heads (2 query heads), "
                          "which do not split into 2 groups of whole kv heads (use a K dividing 1)";
  EXPECT_NE(r.out.find(why), std::string::npos) << r.out;  // (every rank checks; the first to fail aborts the job)
  r = run_cmd_in(temp_dir("dist"), oomb + " train --steps 1 --seq-len 128 --sp-head-chunks 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--sp-head-chunks 2: needs --sp 2 or more"), std::string::npos) << r.out;
  r = run_cmd_in(temp_dir("dist"), oomb + " plan --preset tiny --seq-len 4096 --sp 2 --sp-head-chunks 0");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--sp-head-chunks: must be at least 1, got 0"), std::string::npos) << r.out;
  r = run_cmd_in(temp_dir("dist"), oomb + " plan --preset qwen2.5-7b --seq-len 65536 --chunk-size 4096 --sp 2 "
                 "--sp-head-chunks 2 --sparse-pages 8");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--sp-head-chunks 2 with --sparse-pages: not supported"), std::string::npos) << r.out;
  r = run_cmd_in(temp_dir("dist"), oomb + " plan --preset qwen2.5-7b --seq-len 65536 --chunk-size 4096 --sp 2 "
                 "--sp-head-chunks 2");
  std::cout << r.out;
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("taken in 2 head groups of 7 heads and 1 kv heads (--sp-head-chunks)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--sp-head-chunks 2: host activations"), std::string::npos) << r.out;
}

TEST(Dist, DataParallelAccumulated) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--dp 2 --grad-accum 2");
}

TEST(Dist, ZeroOneAndTwo) {
  NEED_MPI();
  for (int z : {1, 2}) {
    const std::string args = fmt::format("--dp 2 --zero {}", z);
    const CmdResult r = expect_equal_to_single_rank(2, args);
    EXPECT_LE(figure(r.out, "optimizer_per_rank_vs_single_over_ranks"), 0.01) << r.out;
    if (z == 1) {
      EXPECT_EQ(figure(r.out, "zero1_vs_zero0_weights_differing"), 0);
    }
  }
}

// --sweep layer with --sp: each rank keeps its token slice of every layer's output and runs the
// all-to-alls per (layer, chunk); the chunk order's bits on the same ranks, within 1e-6 of one rank,
// the plan equal to every rank's peaks. Untied on the CPU; tied (the lm_head's gradient computed
// again at layer 0) with --doc-mask and everything offloaded on the simulated device; over NCCL's
// code path (the group on device memory, --comm sim-device).
TEST(Dist, LayerSweepWithSequenceParallel) {
  NEED_MPI();
  for (const char* args : {"--sp 2 --sweep layer",
                           "--sp 2 --sweep layer --tie --doc-mask --device sim --offload kv,params",
                           "--sp 2 --sweep layer --device sim --comm sim-device"}) {
    const CmdResult r = expect_equal_to_single_rank(2, args);
    EXPECT_EQ(figure(r.out, "layer_vs_chunk_order_differing"), 0) << args;
  }
}

// Negative control: a tied head's gradient added in the layer order's loss pass (as a plain layer
// order would) is caught by the bitwise comparison with the chunk order.
TEST(Dist, LayerSweepWithSequenceParallelSeesAFault) {
  NEED_MPI();
  const CmdResult r =
      mpirun(2, (binary_dir() / "dist_check").string() + " --sp 2 --sweep layer --tie --layer-fault tied-head");
  std::cout << r.out;
  EXPECT_NE(r.code, 0);
  EXPECT_GT(figure(r.out, "layer_vs_chunk_order_differing"), 0) << r.out;
}

TEST(Dist, CombinedSpDpZeroChunkedOffloadParams) {
  NEED_MPI();
  expect_equal_to_single_rank(4, "--sp 2 --dp 2 --zero 1 --doc-mask --device sim --offload kv,params");
}

// --zero 3: masters, gradients and moments sharded per range, each layer gathered just in time into
// the parameter store's slots (--offload params, simulated device), the collectives' staging in
// pieces of 1000 floats: the loss and every gradient (every rank's shards gathered) within 1e-6 of
// the single rank's, AdamW's losses and weights as for the other layouts, every rank's peaks per
// (tier, tag) its plan, and each rank's pinned weights, gradients and moments 1/P of the single
// rank's within 1% (each range's shard is rounded up to 16 floats); with the tensors' group on
// device memory (NCCL's path, --comm sim-device) too, the layers' gathers staying on the MPI world.
// Without --offload params the shards live in device memory (the same checks, the device's weights
// and gradients less the slots and head 1/P of the single rank's).
TEST(Dist, ZeroThree) {
  NEED_MPI();
  for (const auto& [np, args] :
       {std::pair{2, "--dp 2 --grad-accum 2 --zero 3 --device sim --offload params"},
        {2, "--sp 2 --zero 3 --device sim --offload params"},
        {4, "--sp 2 --dp 2 --zero 3 --doc-mask --device sim --offload kv,params"},
        {2, "--sp 2 --zero 3 --device sim --offload params --comm sim-device"},
        {2, "--dp 2 --grad-accum 2 --zero 3 --device sim"},
        {4, "--sp 2 --dp 2 --zero 3 --doc-mask --device sim --offload kv --comm sim-device"}}) {
    const CmdResult r = expect_equal_to_single_rank(np, args, "OOMB_GRAD_SYNC_PIECE=1000");
    EXPECT_LE(figure(r.out, "optimizer_per_rank_vs_single_over_ranks"), 0.01) << r.out;
    EXPECT_GE(figure(r.out, "weights_grads_per_rank_vs_single_over_ranks"), 0) << r.out;
    EXPECT_LE(figure(r.out, "weights_grads_per_rank_vs_single_over_ranks"), 0.01) << r.out;
  }
}

// --zero 3 with --sweep layer: each layer gathered once per pass, its gradients reduce-scattered
// chunk by chunk (4 chunks a sequence) as the chunk order does: the chunk order's bits on the same
// ranks (loss and every gradient), within 1e-6 of one rank, the plan equal to every rank's peaks;
// on two ranks, on four with a tied head, --doc-mask and --offload kv,params, and on two with the
// shards in device memory (no --offload params).
TEST(Dist, ZeroThreeLayerSweep) {
  NEED_MPI();
  for (const auto& [np, args] :
       {std::pair{2, "--sp 2 --zero 3 --sweep layer --device sim --offload params"},
        {4, "--sp 2 --dp 2 --zero 3 --sweep layer --tie --doc-mask --device sim --offload kv,params"},
        {2, "--dp 2 --zero 3 --sweep layer --tie --device sim"}}) {
    const CmdResult r = expect_equal_to_single_rank(np, args, "OOMB_GRAD_SYNC_PIECE=1000");
    EXPECT_EQ(figure(r.out, "layer_vs_chunk_order_differing"), 0) << args;
    EXPECT_LE(figure(r.out, "weights_grads_per_rank_vs_single_over_ranks"), 0.01) << r.out;
  }
}

// Negative control: the layer order reducing a layer's gradients once, summed over its chunks, gives
// the same values (within 1e-6 of one rank) but not the chunk order's bits, and the check sees it.
TEST(Dist, ZeroThreeLayerSweepSeesOneReduction) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() +
                                    " --dp 2 --zero 3 --sweep layer --device sim --offload params --layer-fault reduce-once");
  std::cout << r.out;
  EXPECT_NE(r.code, 0);
  EXPECT_GT(figure(r.out, "layer_vs_chunk_order_differing"), 0) << r.out;
  EXPECT_GE(figure(r.out, "grad_rel_err"), 0) << r.out;
  EXPECT_LE(figure(r.out, "grad_rel_err"), 1e-6) << r.out;
}

// --zero 3 with --precision bf16: each layer's fp32 range gathered into its gradient slot and cast
// there into the image the layers compute with (the bits one rank's host cast gives): the loss and
// every gradient within 1e-6 of the single rank's bf16 run, AdamW's losses and weights as for fp32,
// the plan equal to every rank's peaks (no pinned images); control: the fp32 run's gradients differ
// from the bf16 ones by more than 1e-4. Two ranks, four with the layer order and --offload kv,params,
// and two with the shards in device memory (against the single rank's resident bf16 run).
// (No --sp here: with bf16, --sp is 2e-4 from one rank whatever --zero, --zero 0 too: the split's fp32
// sums, 1e-7 apart, round to other bf16 values here and there.)
TEST(Dist, ZeroThreeBf16) {
  NEED_MPI();
  for (const auto& [np, args] :
       {std::pair{2, "--dp 2 --grad-accum 2 --zero 3 --precision bf16 --device sim --offload params"},
        {4, "--dp 4 --zero 3 --precision bf16 --sweep layer --doc-mask --device sim --offload kv,params"},
        {2, "--dp 2 --zero 3 --precision bf16 --device sim"}}) {
    const CmdResult r = expect_equal_to_single_rank(np, args, "OOMB_GRAD_SYNC_PIECE=1000");
    EXPECT_GT(figure(r.out, "bf16_vs_fp32_grad_rel_err"), 1e-4) << r.out;
    EXPECT_LE(figure(r.out, "weights_grads_per_rank_vs_single_over_ranks"), 0.01) << r.out;
  }
}

// Negative control: --zero 3 without the reduce-scatter of the layers' and head's gradients, the
// shards pinned or on the device.
TEST(Dist, ZeroThreeCheckFailsWithoutTheReduceScatter) {
  NEED_MPI();
  for (const char* offload : {" --offload params", ""}) {
    const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() + " --dp 2 --zero 3 --device sim --skip-reduce" +
                                      offload);
    std::cout << r.out;
    EXPECT_NE(r.code, 0) << offload;
    EXPECT_GT(figure(r.out, "grad_rel_err"), 1e-2) << offload;
  }
}

// --zero 3's refusals (no device; LoRA) name why; `oomb plan --zero 3` gives one rank's bytes: its pinned
// weights, gradients and moments half of --zero 0's on two ranks (within 1%), once --zero 0's staging for
// the untied embedding it keeps on the host is taken off (two slots of C rows of d floats: --zero 3 keeps
// its shard of the embedding on the device, gathered like any layer's); --out saves every
// rank's shards gathered: the weights of --zero 0's --out within 1e-4, not the initial ones.
TEST(Dist, ZeroThreeRefusalsPlanAndOut) {
  NEED_MPI();
  const std::string oomb = (binary_dir() / "oomb").string();
  CmdResult r = mpirun(2, oomb + " train --steps 1 --seq-len 128 --dp 2 --zero 3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--zero 3: needs a device (--device sim or cuda)"), std::string::npos) << r.out;
  const auto dir = temp_dir("z3ck");
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  r = mpirun(2, fmt::format("{} train --model {}/m --data {}/tokens.bin --steps 1 --seq-len 128 --dp 2 --zero 3 "
                            "--device sim --lora-rank 4", oomb, dir.string(), dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--zero 3 with LoRA: not supported yet"), std::string::npos) << r.out;
  auto pinned = [&](int zero, const std::string& tag) {
    const auto dir = temp_dir("z3plan");
    const CmdResult p = run_cmd_in(dir, fmt::format("{} plan --preset tiny --seq-len 1024 --dp 2 --zero {} --device sim "
                                                    "--offload params --json", oomb, zero));
    EXPECT_EQ(p.code, 0) << p.out;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(p.out, m, std::regex("\"pinned\":\\{[^}]*\"" + tag + "\":([0-9]+)"))) << p.out;
    return m.size() > 1 ? std::stod(m[1]) : -1.0;
  };
  const ModelConfig tiny = preset_config("tiny");
  ASSERT_FALSE(tiny.tie_word_embeddings);
  const double staging = 2.0 * 1024 * tiny.hidden * 4;  // C = min(N, 1024) = 1024
  for (const char* tag : {"weights", "grads", "optimizer"}) {
    const double z0 = pinned(0, tag) - (std::string(tag) == "optimizer" ? 0 : staging), z3 = pinned(3, tag);
    std::cout << "oomb plan --dp 2, pinned " << tag << ": --zero 0 " << z0 << " B (less embedding staging), --zero 3 "
              << z3 << " B" << std::endl;
    EXPECT_LE(std::abs(z3 * 2 - z0) / z0, 0.01) << tag;
  }
  const std::string run = fmt::format("{} train --model {}/m --data {}/tokens.bin --steps 2 --seq-len 128 --chunk-size 64 "
                                      "--dp 2 --device sim --offload params", oomb, dir.string(), dir.string());
  for (int z : {0, 3}) {
    r = mpirun(2, fmt::format("{} --zero {} --out {}/out{}", run, z, dir.string(), z));
    ASSERT_EQ(r.code, 0) << r.out;
  }
  const ModelConfig cfg = load_config((dir / "m").string());
  auto weights = [&](const std::string& name) {
    Params w(cfg, Tier::Host, Tag::IO);
    load_weights((dir / name).string(), cfg, w);
    return std::vector<float>(w.flat().as<float>(), w.flat().as<float>() + w.flat().numel());
  };
  const double e = rel_error(weights("out3"), weights("out0")), moved = rel_error(weights("out3"), weights("m"));
  std::cout << "--out after 2 steps, --zero 3 against --zero 0: rel. error " << e << " (against the initial weights "
            << moved << ")" << std::endl;
  EXPECT_LE(e, 1e-4);
  EXPECT_GT(moved, 1e-4);
}

// On a device the gradients and parameters cross through host staging a piece at a time: pieces of
// 1000 floats (OOMB_GRAD_SYNC_PIECE) make a tiny model take that path many times over.
TEST(Dist, DeviceStagingInPieces) {
  NEED_MPI();
  for (int z : {0, 1, 2}) {
    const CmdResult r = expect_equal_to_single_rank(
        2, fmt::format("--dp 2 --zero {} --device sim", z), "OOMB_GRAD_SYNC_PIECE=1000");
    if (z == 1) {
      EXPECT_EQ(figure(r.out, "zero1_vs_zero0_weights_differing"), 0);
    }
  }
}

// NCCL's code path without NCCL: on --device sim, MPI's group presented as taking device memory.
// Ulysses packs on the device and sends from device staging, gradients are summed in place and
// shards staged on the device, and the plan puts that staging in the device's workspace.
TEST(Dist, DeviceMemoryGroupOnSim) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--sp 2 --device sim --comm sim-device");
  expect_equal_to_single_rank(4, "--sp 2 --dp 2 --zero 2 --doc-mask --device sim --comm sim-device --offload kv",
                              "OOMB_GRAD_SYNC_PIECE=1000");
  for (int z : {0, 1})
    expect_equal_to_single_rank(2, fmt::format("--dp 2 --zero {} --device sim --comm sim-device", z),
                                "OOMB_GRAD_SYNC_PIECE=1000");
  // pinned gradients (--offload params) cross over MPI's group, not the device group
  expect_equal_to_single_rank(2, "--dp 2 --zero 1 --device sim --comm sim-device --offload kv,params",
                              "OOMB_GRAD_SYNC_PIECE=1000");
}

// One GPU shared by two ranks over the MPI path (host staging): the one-GPU check.
TEST(Dist, TwoRanksSharingOneGpuOverMpi) {
  NEED_MPI();
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << "no GPU: " << why;
  expect_equal_to_single_rank(2, "--sp 2 --device cuda --comm mpi");
  expect_equal_to_single_rank(2, "--dp 2 --zero 2 --device cuda --comm mpi", "OOMB_GRAD_SYNC_PIECE=1000");
}

// NCCL, GPU to GPU: Ulysses' exchanges packed on the device, gradients summed and shards gathered
// without host staging. NCCL needs a GPU per rank.
TEST(Dist, NcclTwoRanksOnTwoGpus) {
  NEED_MPI();
  if (const std::string why = nccl_unavailable(2); !why.empty()) GTEST_SKIP() << why;
  expect_equal_to_single_rank(2, "--sp 2 --device cuda --comm nccl");
  expect_equal_to_single_rank(2, "--dp 2 --zero 2 --device cuda --comm nccl", "OOMB_GRAD_SYNC_PIECE=1000");
  expect_equal_to_single_rank(2, "--dp 2 --zero 1 --device cuda --comm nccl");
}

// --comm nccl where NCCL cannot serve (the CPU backend here): an error naming the flag and why.
TEST(Dist, NcclRefusedNamingWhy) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() + " --sp 2 --comm nccl");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--comm nccl: the cpu backend is not a GPU's"), std::string::npos) << r.out;
}

// Negative control: without the gradients' sum over ranks the check must fail.
TEST(Dist, CheckFailsWithoutTheGradientSum) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() + " --sp 2 --skip-reduce");
  std::cout << r.out;
  EXPECT_NE(r.code, 0);
  EXPECT_GT(figure(r.out, "grad_rel_err"), 1e-2);
}

// oomb train under mpirun: bad layouts and faults end with an error naming the flag or the call,
// never a hang (ctest's TIMEOUT is the only clock here).
TEST(Dist, WorldSizeMustBeSpTimesDp) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "oomb").string() + " train --steps 1 --seq-len 128 --sp 4");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--sp 4 x --dp 1 = 4 ranks, but mpirun started 2"), std::string::npos) << r.out;
}

TEST(Dist, HeadsAndChunkMustDivide) {
  NEED_MPI();
  CmdResult r = mpirun(4, (binary_dir() / "oomb").string() + " train --steps 1 --seq-len 128 --sp 4");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--sp 4: each rank takes heads / 4 and kv heads / 4"), std::string::npos) << r.out;
  r = mpirun(2, (binary_dir() / "oomb").string() + " train --steps 1 --seq-len 126 --chunk-size 63 --sp 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--chunk-size 63: not divisible by --sp 2"), std::string::npos) << r.out;
}

TEST(Dist, RanksWithOtherFlagsAreNamed) {
  NEED_MPI();
  const std::string oomb = (binary_dir() / "oomb").string();
  const CmdResult r = mpirun_line(fmt::format("-np 1 {0} train --dp 2 --seq-len 128 --steps 2 : -np 1 {0} train "
                                              "--dp 2 --seq-len 128 --steps 3", oomb));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("rank 1 runs with other flags than rank 0: rank 0 has `steps=2`, rank 1 has `steps=3`"),
            std::string::npos) << r.out;
}

TEST(Dist, CollectiveTimesOutNamingTheCall) {
  NEED_MPI();
  const CmdResult r =
      mpirun(2, (binary_dir() / "dist_check").string() + " --dp 2 --stall-rank 1 --dist-timeout 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("not finished after 2 s (--dist-timeout)"), std::string::npos) << r.out;
}

TEST(Dist, RankDyingMidStepEndsTheJob) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() + " --sp 2 --die-rank 1");
  EXPECT_NE(r.code, 0);
  // mpirun names the rank that died (its exit code 9) and ends the others
  EXPECT_NE(r.out.find("exited with non-zero status"), std::string::npos) << r.out;
}

// oomb eval on several ranks: --sp splits each chunk's tokens, --dp the windows; the loss, the
// targets and every bucket of the loss by position equal one rank's (the sums differ only by the
// ranks' order of addition).
TEST(Dist, EvalOnRanksEqualsOneRank) {
  NEED_MPI();
  const auto dir = temp_dir("dist_eval");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string eval = fmt::format("{} eval --model {}/m --data {}/tokens.bin --seq-len 256 --buckets 4 "
                                       "--chunk-size 32 --page-size 16 --windows 6", oomb, dir.string(),
                                       dir.string());
  // the result as --out writes it (stdout and the ranks' stderr interleave under mpirun)
  int runs = 0;
  auto result = [&](const CmdResult& r, const std::filesystem::path& out) {
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(read_text(out), nullptr, false);
  };
  auto on_ranks = [&](int np, const std::string& args) {
    const auto out = dir / fmt::format("eval{}.json", runs++);
    return result(mpirun(np, fmt::format("{} {} --out {}", eval, args, out.string())), out);
  };
  const auto ref_out = dir / "eval_one.json";
  const nlohmann::json ref =
      result(run_cmd_in(dir, fmt::format("OMP_NUM_THREADS=1 {} --out {}", eval, ref_out.string())), ref_out);
  ASSERT_FALSE(ref.is_discarded());
  for (const auto& [np, flags] : {std::pair{2, "--sp 2"}, {3, "--dp 3"}, {4, "--sp 2 --dp 2"}}) {
    SCOPED_TRACE(flags);
    const nlohmann::json got = on_ranks(np, flags);
    ASSERT_FALSE(got.is_discarded());
    EXPECT_EQ(got["targets"], ref["targets"]);
    EXPECT_EQ(got["windows"], ref["windows"]);
    double worst = std::abs(got["loss"].get<double>() - ref["loss"].get<double>()) / ref["loss"].get<double>();
    for (size_t b = 0; b < 4; ++b) {
      const auto& x = got["loss_by_position"][b];
      const auto& y = ref["loss_by_position"][b];
      EXPECT_EQ(x["targets"], y["targets"]);
      EXPECT_EQ(x["accuracy"], y["accuracy"]);
      worst = std::max(worst, std::abs(x["loss"].get<double>() - y["loss"].get<double>()) / y["loss"].get<double>());
    }
    std::cout << fmt::format("eval {}: loss {:.6f} (one rank {:.6f}), worst bucket rel. error {:.2e}", flags,
                             got["loss"].get<double>(), ref["loss"].get<double>(), worst)
              << std::endl;
    EXPECT_LE(worst, 1e-6);
  }
  // control: fewer windows change the figures this compares
  std::string four = eval;
  four.replace(four.find("--windows 6"), 11, "--windows 4");
  const auto four_out = dir / "eval_four.json";
  EXPECT_NE(result(mpirun(2, fmt::format("{} --dp 2 --out {}", four, four_out.string())), four_out)["loss"], ref["loss"]);
  const CmdResult passkey = mpirun(2, fmt::format("{} eval --model {}/m --passkey --sp 2", oomb, dir.string()));
  EXPECT_NE(passkey.code, 0);
  EXPECT_NE(passkey.out.find("--passkey with --sp/--dp: not supported"), std::string::npos) << passkey.out;
}

// Checkpoints with several ranks (--zero 0): rank 0 writes the same files a single rank writes (its
// weights within 1e-6 of the single rank's, --grad-accum 2 against --dp 2), and a resumed run on two
// ranks ends bit for bit where the uninterrupted one did.
TEST(Dist, CheckpointsWrittenByRankZeroAndResumed) {
  NEED_MPI();
  const auto dir = temp_dir("dist_ckpt");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string run = fmt::format("{} train --model {}/m --data {}/tokens.bin --seq-len 256 --chunk-size 64 --steps 4 "
                                      "--save-every 2 --log-every 1", oomb, dir.string(), dir.string());
  CmdResult single = run_cmd_in(dir, fmt::format("OMP_NUM_THREADS=1 {} --grad-accum 2 --checkpoint-dir {}/a", run,
                                                 dir.string()));
  ASSERT_EQ(single.code, 0) << single.out;
  CmdResult two = mpirun(2, run + " --dp 2 --checkpoint-dir " + (dir / "b").string());
  ASSERT_EQ(two.code, 0) << two.out;
  const ModelConfig cfg = load_config((dir / "m").string());
  auto weights = [&](const std::filesystem::path& p) {
    Params w(cfg, Tier::Host, Tag::IO);
    load_weights(p.string(), cfg, w);
    return std::vector<float>(w.flat().as<float>(), w.flat().as<float>() + w.flat().numel());
  };
  const double e = rel_error(weights(dir / "b/step-000004"), weights(dir / "a/step-000004"));
  std::cout << "two ranks' checkpoint against one rank's, after 4 AdamW steps: rel. error " << e << std::endl;
  EXPECT_LE(e, 1e-4);  // AdamW steps (see dist_check's weights bound)
  // resumed on two ranks from step 2: the same step-4 files, bit for bit
  CmdResult resumed = mpirun(2, run + " --dp 2 --checkpoint-dir " + (dir / "c").string() + " --resume " +
                                    (dir / "b/step-000002").string());
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_EQ(read_text(dir / "c/step-000004/model.safetensors"), read_text(dir / "b/step-000004/model.safetensors"));
  EXPECT_EQ(read_text(dir / "c/step-000004/optimizer.safetensors"),
            read_text(dir / "b/step-000004/optimizer.safetensors"));
  // a single rank resuming the two ranks' checkpoint is another run (windows per step differ)
  CmdResult other = run_cmd_in(dir, fmt::format("{} --grad-accum 2 --checkpoint-dir {}/e --resume {}/b/step-000002",
                                                run, dir.string(), dir.string()));
  EXPECT_NE(other.code, 0);
  EXPECT_NE(other.out.find("--dp"), std::string::npos) << other.out;
}

namespace {
// The "loss" of every line of a --metrics file, as written (JSON doubles round-trip: equal text is equal bits).
std::vector<std::string> metric_losses(const std::filesystem::path& p) {
  std::vector<std::string> v;
  const std::string t = read_text(p);
  const std::regex loss("\"loss\":([^,}]+)");
  for (auto it = std::sregex_iterator(t.begin(), t.end(), loss); it != std::sregex_iterator(); ++it)
    v.push_back((*it)[1]);
  return v;
}

// Adds `delta` to the float at byte `at` of a safetensors file's data section (at < 0: from its end).
void bump_float(const std::filesystem::path& p, int64_t at, float delta) {
  std::string b = read_text(p);
  uint64_t header = 0;
  std::memcpy(&header, b.data(), 8);
  const size_t off = at >= 0 ? size_t(8 + header + uint64_t(at)) : size_t(int64_t(b.size()) + at);
  float x;
  std::memcpy(&x, b.data() + off, 4);
  x += delta;
  std::memcpy(b.data() + off, &x, 4);
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(b.data(), std::streamsize(b.size()));
}
}  // namespace

// Checkpoints with AdamW's moments sharded (--zero 1, 2): rank 0 writes the files one optimizer
// holding every moment writes, each rank's shard reaching it in pieces of 1000 floats
// (OOMB_GRAD_SYNC_PIECE: many pieces on the tiny model), and a resumed run, each rank reading its
// shard, repeats the uninterrupted run's later losses and files bit for bit. --zero 1's math is
// --zero 0's bit for bit, so its files are --zero 0's, and a checkpoint resumes under either layout.
// --zero 2 sums the gradient norm's squares by shard (another order) and --sp sums the gradients in
// another order, so their files need not be --zero 0's (printed, not asserted); 4 ranks: --sp 2 --dp 2.
// Negative controls: one moment changed in the first rank's shard, or the last rank's, and the
// resumed run's files differ.
TEST(Dist, CheckpointsWithShardedMoments) {
  NEED_MPI();
  const auto dir = temp_dir("dist_ckpt_zero");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string run = fmt::format("{} train --model {}/m --data {}/tokens.bin --seq-len 256 --chunk-size 64 --steps 4 "
                                      "--save-every 2 --log-every 1 --dp 2", oomb, dir.string(), dir.string());
  const std::string piece = "OOMB_GRAD_SYNC_PIECE=1000";
  auto train = [&](const std::string& flags, const std::string& out, const std::string& resume = "") {
    const int np = flags.find("--sp 2") != std::string::npos ? 4 : 2;
    const CmdResult r = mpirun(np, fmt::format("{} {} --checkpoint-dir {}/{} --metrics {}/{}.jsonl{}", run, flags,
                                              dir.string(), out, dir.string(), out,
                                              resume.empty() ? "" : " --resume " + (dir / resume).string()), piece);
    EXPECT_EQ(r.code, 0) << flags << " " << out << "\n" << r.out;
  };
  auto file = [&](const std::string& run_dir, int step, const char* name) {
    return read_text(dir / run_dir / fmt::format("step-{:06}", step) / name);
  };
  auto same_files = [&](const std::string& x, const std::string& y, int step) {
    return file(x, step, "model.safetensors") == file(y, step, "model.safetensors") &&
           file(x, step, "optimizer.safetensors") == file(y, step, "optimizer.safetensors");
  };
  train("--zero 0", "z0");
  for (const char* layout : {"--zero 1", "--zero 2", "--zero 1 --device sim --offload params", "--zero 2 --sp 2"}) {
    SCOPED_TRACE(layout);
    std::string u = "u";  // "u1", "u1devicesimoffloadparams", ...
    for (const char* c = layout + 7; *c; ++c)
      if (std::isalnum(static_cast<unsigned char>(*c))) u += *c;
    const std::string r = u + "r";
    train(layout, u);
    train(layout, r, u + "/step-000002");
    EXPECT_FALSE(file(u, 4, "optimizer.safetensors").empty());
    EXPECT_TRUE(same_files(r, u, 4)) << "resumed from step 2: other step-4 files";
    const std::vector<std::string> lu = metric_losses(dir / (u + ".jsonl")), lr = metric_losses(dir / (r + ".jsonl"));
    ASSERT_EQ(lu.size(), 4u);
    ASSERT_EQ(lr.size(), 2u);
    EXPECT_EQ(lr[0], lu[2]);
    EXPECT_EQ(lr[1], lu[3]);
    const bool as_zero0 = same_files(u, "z0", 2) && same_files(u, "z0", 4);
    std::cout << layout << ": resumed run's losses " << lr[0] << ", " << lr[1] << " (uninterrupted " << lu[2] << ", "
              << lu[3] << "); files equal --zero 0's: " << (as_zero0 ? "yes" : "no") << std::endl;
    if (std::string(layout) == "--zero 1") {
      EXPECT_TRUE(as_zero0);
    }
  }
  // one layout's checkpoint resumed under another: --zero 1 from --zero 0's, and --zero 0 from --zero 1's
  train("--zero 1", "x1", "z0/step-000002");
  train("--zero 0", "x0", "u1/step-000002");
  EXPECT_TRUE(same_files("x1", "z0", 4));
  EXPECT_TRUE(same_files("x0", "z0", 4));
  // negative controls: the first moment of rank 0's shard, then the last of rank 1's, changed
  for (const auto& [name, at, delta] : {std::tuple{"n0", int64_t(0), 1e-3f}, {"n1", int64_t(-4), 1.0f}}) {
    std::filesystem::create_directories(dir / name);
    std::filesystem::copy(dir / "u1/step-000002", dir / name / "step-000002", std::filesystem::copy_options::recursive);
    bump_float(dir / name / "step-000002/optimizer.safetensors", at, delta);
    train("--zero 1", std::string(name) + "r", std::string(name) + "/step-000002");
    EXPECT_FALSE(same_files(std::string(name) + "r", "u1", 4)) << name << ": a changed moment went unnoticed";
  }
}

// Checkpoints under --zero 3: rank 0 gathers the masters range by range, and every rank's parts of
// the moments reach it in flat order (pieces of 1000 floats), so the files are those one optimizer
// writes; each rank reads back its parts. With one chunk a sequence and no clipping (--grad-clip 0)
// --zero 3's arithmetic is --zero 0's bit for bit (two ranks' gradients summed by one addition
// either way; no chunk-by-chunk sums; the norm's order unused), so its step-2 and step-4 files are
// --zero 0's byte for byte (and so --zero 1's: CheckpointsWithShardedMoments); resumed from step 2,
// under --zero 3 and across layouts (--zero 3 from --zero 0's checkpoint; --zero 0 and --zero 1
// from --zero 3's), the step-4 files and the losses are the uninterrupted run's; with the shards in
// device memory (no --offload params) the same files, and resumed from the offloaded run's. With 4 chunks a
// sequence and clipping (--zero 3's own bits): resumed from step 2 bit for bit; four ranks (--sp 2
// --dp 2 --zero 3) from two ranks' checkpoint, and two from four ranks', within 1e-4 of the
// uninterrupted run (--sp sums in another order). Negative controls: one moment changed in rank 0's
// part or in rank 1's, and the resumed run's files differ.
TEST(Dist, CheckpointsUnderZeroThree) {
  NEED_MPI();
  const auto dir = temp_dir("dist_ckpt_zero3");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string base = fmt::format("{} train --model {}/m --data {}/tokens.bin --steps 4 --save-every 2 "
                                       "--log-every 1 --device sim", oomb, dir.string(), dir.string());
  const std::string run = base + " --dp 2";  // (--offload params in each run's flags, or the shards on the device)
  auto train = [&](const std::string& flags, const std::string& out, const std::string& resume = "") {
    const int np = flags.find("--sp 2") != std::string::npos ? 4 : 2;
    const CmdResult r = mpirun(np, fmt::format("{} {} --checkpoint-dir {}/{} --metrics {}/{}.jsonl{}", run, flags,
                                              dir.string(), out, dir.string(), out,
                                              resume.empty() ? "" : " --resume " + (dir / resume).string()),
                               "OOMB_GRAD_SYNC_PIECE=1000");
    EXPECT_EQ(r.code, 0) << flags << " " << out << "\n" << r.out;
  };
  auto file = [&](const std::string& run_dir, int step, const char* name) {
    return read_text(dir / run_dir / fmt::format("step-{:06}", step) / name);
  };
  auto same_files = [&](const std::string& x, const std::string& y, int step) {
    return !file(x, step, "optimizer.safetensors").empty() &&
           file(x, step, "model.safetensors") == file(y, step, "model.safetensors") &&
           file(x, step, "optimizer.safetensors") == file(y, step, "optimizer.safetensors") &&
           file(x, step, "config.json") == file(y, step, "config.json");
  };
  auto same_losses = [&](const std::string& resumed, const std::string& whole) {
    const std::vector<std::string> lr = metric_losses(dir / (resumed + ".jsonl")),
                                   lu = metric_losses(dir / (whole + ".jsonl"));
    std::cout << resumed << ": losses of steps 3, 4 " << (lr.size() == 2 ? lr[0] + ", " + lr[1] : "?") << " ("
              << whole << ": " << (lu.size() == 4 ? lu[2] + ", " + lu[3] : "?") << ")" << std::endl;
    return lr.size() == 2 && lu.size() == 4 && lr[0] == lu[2] && lr[1] == lu[3];
  };
  const ModelConfig cfg = load_config((dir / "m").string());
  auto weights = [&](const std::filesystem::path& p) {
    Params w(cfg, Tier::Host, Tag::IO);
    load_weights(p.string(), cfg, w);
    return std::vector<float>(w.flat().as<float>(), w.flat().as<float>() + w.flat().numel());
  };

  const std::string one = "--seq-len 128 --chunk-size 128 --grad-clip 0 --offload params";
  train(one + " --zero 0", "a0");
  train(one + " --zero 3", "a3");
  EXPECT_TRUE(same_files("a3", "a0", 2)) << "--zero 3's step-2 files are not --zero 0's";
  EXPECT_TRUE(same_files("a3", "a0", 4)) << "--zero 3's step-4 files are not --zero 0's";
  // One rank (--grad-accum 2: the same windows) adds the two windows' gradients inside its backward,
  // not after: the same files but for those roundings (the safetensors headers and config.json byte
  // for byte, the weights and moments within 1e-6), and --zero 3's moved from step 2's (control).
  const CmdResult single = run_cmd_in(dir, fmt::format("OMP_NUM_THREADS=1 {} {} --grad-accum 2 --checkpoint-dir {}/s1",
                                                       base, one, dir.string()));
  ASSERT_EQ(single.code, 0) << single.out;
  auto header = [&](const std::string& text) {
    uint64_t n = 0;
    if (text.size() >= 8) std::memcpy(&n, text.data(), 8);
    return text.size() >= 8 + n ? text.substr(0, 8 + n) : std::string();
  };
  auto floats = [&](const std::string& text) {
    const size_t h = header(text).size();
    std::vector<float> v((text.size() - h) / 4);
    if (!v.empty()) std::memcpy(v.data(), text.data() + h, v.size() * 4);
    return v;
  };
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string z3 = file("a3", 4, name), s1 = file("s1", 4, name);
    EXPECT_FALSE(header(z3).empty()) << name;
    EXPECT_EQ(header(z3), header(s1)) << name;
    const double e = rel_error(floats(z3), floats(s1)), moved = rel_error(floats(z3), floats(file("a3", 2, name)));
    std::cout << "--zero 3 against one rank, step 4's " << name << ": rel. error " << e << " (byte-identical: "
              << (z3 == s1 ? "yes" : "no") << "; against step 2's " << moved << ")" << std::endl;
    EXPECT_LE(e, 1e-6) << name;
    EXPECT_GT(moved, 1e-4) << name;
  }
  EXPECT_EQ(file("a3", 4, "config.json"), file("s1", 4, "config.json"));
  // the shards in device memory (no --offload params): the same files; resumed from the offloaded run's
  const std::string one_dev = "--seq-len 128 --chunk-size 128 --grad-clip 0";
  train(one_dev + " --zero 3", "a3d");
  EXPECT_TRUE(same_files("a3d", "a0", 2) && same_files("a3d", "a0", 4)) << "device shards: not --zero 0's files";
  train(one_dev + " --zero 3", "a3dr", "a3/step-000002");
  EXPECT_TRUE(same_files("a3dr", "a0", 4));
  EXPECT_TRUE(same_losses("a3dr", "a0"));
  train(one + " --zero 3", "a3r", "a3/step-000002");
  EXPECT_TRUE(same_files("a3r", "a3", 4));
  EXPECT_TRUE(same_losses("a3r", "a3"));
  train(one + " --zero 3", "a3x", "a0/step-000002");  // --zero 0's checkpoint under --zero 3
  EXPECT_TRUE(same_files("a3x", "a0", 4));
  EXPECT_TRUE(same_losses("a3x", "a0"));
  for (const char* z : {"0", "1"}) {  // --zero 3's checkpoint under --zero 0 and 1
    const std::string out = std::string("a") + z + "x";
    train(one + " --zero " + z, out, "a3/step-000002");
    EXPECT_TRUE(same_files(out, "a0", 4)) << out;
    EXPECT_TRUE(same_losses(out, "a0")) << out;
  }
  // negative controls: the first moment (rank 0's part of the embedding), then the last (rank 1's
  // part of the tail), changed
  for (const auto& [name, at, delta] : {std::tuple{"n0", int64_t(0), 1e-3f}, {"n1", int64_t(-4), 1.0f}}) {
    std::filesystem::create_directories(dir / name);
    std::filesystem::copy(dir / "a3/step-000002", dir / name / "step-000002", std::filesystem::copy_options::recursive);
    bump_float(dir / name / "step-000002/optimizer.safetensors", at, delta);
    train(one + " --zero 3", std::string(name) + "r", std::string(name) + "/step-000002");
    EXPECT_FALSE(same_files(std::string(name) + "r", "a3", 4)) << name << ": a changed moment went unnoticed";
  }

  const std::string four = "--seq-len 256 --chunk-size 64 --offload params";
  train(four + " --zero 3", "b2");
  train(four + " --zero 3", "b2r", "b2/step-000002");
  EXPECT_TRUE(same_files("b2r", "b2", 4));
  EXPECT_TRUE(same_losses("b2r", "b2"));
  train(four + " --zero 3 --sp 2", "b4");
  train(four + " --zero 3 --sp 2", "b4x", "b2/step-000002");  // two ranks' checkpoint on four
  train(four + " --zero 3", "b2x", "b4/step-000002");         // and four ranks' on two
  for (const auto& [resumed, whole, from] : {std::tuple{"b4x", "b2", "b2"}, {"b2x", "b4", "b4"}}) {
    const std::vector<float> got = weights(dir / resumed / "step-000004"), want = weights(dir / whole / "step-000004");
    const double e = rel_error(got, want), moved = rel_error(got, weights(dir / from / "step-000002"));
    std::cout << resumed << " against " << whole << " at step 4: rel. error " << e << " (against step 2's weights "
              << moved << ")" << std::endl;
    EXPECT_LE(e, 1e-4) << resumed;
    EXPECT_GT(moved, 1e-4) << resumed;
  }
}
