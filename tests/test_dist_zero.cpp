// Data parallelism and sharding on many CPU ranks: --dp, --zero 1, 2 and 3 (with the layer order,
// bf16, the shards pinned or on the device), a combined layout, and the device's staging in pieces,
// each through tests/dist/dist_check under mpirun against the single-rank run.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <fmt/format.h>
#include <regex>
#include <vector>

#include "dist/mpirun_util.h"
#include "metrics_plan.h"
#include "hf/checkpoint.h"
#include "hf/config.h"
#include "model/init.h"
#include "model/params.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

TEST(Dist, DataParallelAccumulated) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--dp 2 --grad-accum 2");
}

// Prompts not trained (dist_check --masked): windows and ranks hold unequal counts of targets, and
// the trainer's loss is the mean over every target of a step, its count summed over the dp ranks.
TEST(Dist, DataParallelWithUnequalTargetCounts) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--dp 2 --grad-accum 2 --masked");
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

TEST(Dist, CombinedSpDpZeroChunkedOffloadParams) {
  NEED_MPI();
  expect_equal_to_single_rank(4, "--sp 2 --dp 2 --zero 1 --doc-mask --device sim --offload kv,params");
}

// --zero 3: masters, gradients and moments sharded per range, each layer gathered just in time into
// the parameter store's slots (--offload params, simulated device), the collectives' staging in
// pieces of 1000 floats: the loss and every gradient (every rank's shards gathered) within 1e-6 of
// the single rank's, AdamW's losses and weights as for the other layouts, every rank's peaks per
// (tier, tag) its plan, and each rank's pinned weights and gradients and host moments 1/P of the single
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
  auto planned = [&](int zero, const std::string& tier, const std::string& tag) {
    const auto dir = temp_dir("z3plan");
    const CmdResult p = run_cmd_in(dir, fmt::format("{} plan --preset tiny --seq-len 1024 --dp 2 --zero {} --device sim "
                                                    "--offload params --json", oomb, zero));
    EXPECT_EQ(p.code, 0) << p.out;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(p.out, m, std::regex("\"" + tier + "\":\\{[^}]*\"" + tag + "\":([0-9]+)"))) << p.out;
    return m.size() > 1 ? std::stod(m[1]) : -1.0;
  };
  const ModelConfig tiny = preset_config("tiny");
  ASSERT_FALSE(tiny.tie_word_embeddings);
  const double staging = 2.0 * 1024 * tiny.hidden * 4;  // C = min(N, 1024) = 1024
  for (const char* tag : {"weights", "grads", "optimizer"}) {
    const bool moments = std::string(tag) == "optimizer";  // (in plain host memory, not pinned)
    const std::string tier = moments ? "host" : "pinned";
    const double z0 = planned(0, tier, tag) - (moments ? 0 : staging), z3 = planned(3, tier, tag);
    std::cout << "oomb plan --dp 2, " << tier << " " << tag << ": --zero 0 " << z0
              << " B (less embedding staging), --zero 3 " << z3 << " B" << std::endl;
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

// `oomb plan` with the ranks' flags gives one rank's bytes: equal, per (tier, tag), to the peaks
// rank 0 of `mpirun oomb train` reports in its --metrics (the command line end to end, where
// dist_check asks the planner itself), for sequence and data parallelism, each ZeRO stage, and four
// ranks on the simulated device with K/V and parameters offloaded.
TEST(Dist, PlanEqualsTheRanksMeasuredPeaks) {
  NEED_MPI();
  const auto dir = temp_dir("dist_plan");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string shape = fmt::format("--model {}/m --seq-len 256 --chunk-size 64", dir.string());
  const std::pair<int, const char*> layouts[] = {
      {2, "--sp 2"}, {2, "--dp 2 --zero 1"}, {2, "--dp 2 --zero 2"}, {2, "--dp 2 --zero 3 --device sim"},
      {4, "--sp 2 --dp 2 --zero 3 --device sim --offload kv,params"}};
  for (const auto& [np, flags] : layouts) {
    SCOPED_TRACE(fmt::format("-np {} {}", np, flags));
    const auto metrics = dir / "m.jsonl";
    std::filesystem::remove(metrics);
    const CmdResult train = mpirun(np, fmt::format("{} train {} --data {}/tokens.bin --steps 2 --metrics {} {}", oomb,
                                                   shape, dir.string(), metrics.string(), flags));
    ASSERT_EQ(train.code, 0) << train.out;
    const CmdResult plan = run_cmd_in(dir, fmt::format("{} plan {} {} --json", oomb, shape, flags));
    ASSERT_EQ(plan.code, 0) << plan.out;
    const auto j = nlohmann::json::parse(plan.out.substr(plan.out.rfind("\n{") + 1));
    expect_peaks_equal_plan(last_metrics_line(metrics)["memory"], j, std::string(flags).find("--zero 3") == std::string::npos);
  }
}
