// Ulysses sequence parallelism (--sp) on many CPU ranks: tests/dist/dist_check under `mpirun -np 2`
// and `-np 4` (oversubscribed) against the single-rank run (loss, every gradient, the weights after
// AdamW steps, per-rank memory against the plan), head-chunked attention (--sp-head-chunks), the
// layer order with --sp, and oomb eval on ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <regex>

#include "dist/mpirun_util.h"
#include "metrics_plan.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

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

// --precision bf16 on ranks of the CPU: against the single rank within twice bf16's own
// reduction-order noise (dist_check --bf16-order-noise: the single rank's runs in other chunk sizes
// against its run; the loss, every gradient, every AdamW step's loss, the weights after them), that
// noise below bf16's distance from fp32 (so the check tells bf16 from fp32), and every rank's peaks
// its plan (the CPU's bf16 matmul scratch sized for the token side's q projection, every head).
// Not within fp32's 1e-6: the CPU's BLAS sums t rows in another order than T rows, and bf16 rounds
// some of those differences up to a unit of its last place, which the layers after carry on
// (measured: the ranks' gradients 1.7e-3 from the single rank's in layer 0's q_proj with 8 heads,
// the single rank's own chunk sizes 4.4e-3; simt, whose GEMM sums each element alike, holds 1e-6:
// DistSimt.Bf16InTheOtherOrder).
// With head groups (the chunk order keeps each layer's attention output in bf16, and the layer
// casts each group's back before reading it): K = 2's bits are also K = 1's on the same ranks,
// before and after AdamW steps.
TEST(Dist, Bf16WithinItsOwnOrderNoiseAndHeadChunksGiveOneGroupsBits) {
  NEED_MPI();
  for (const std::string args : {"", "--heads 8 --kv-heads 4 --sp-head-chunks 2",
                                 "--heads 8 --kv-heads 4 --sp-head-chunks 2 --keep-attention --device sim "
                                 "--offload kv"}) {
    const CmdResult r =
        mpirun(2, (binary_dir() / "dist_check").string() + " --sp 2 --precision bf16 --bf16-order-noise " + args);
    SCOPED_TRACE(args + "\n" + r.out);
    EXPECT_EQ(r.code, 0);
    const double grad_noise = figure(r.out, "grad_noise_single_rank"), fp32 = figure(r.out, "bf16_vs_fp32_grad_rel_err");
    EXPECT_GT(grad_noise, 0);
    EXPECT_GT(fp32, 1e-4);  // (it is bf16)
    EXPECT_LT(2 * grad_noise, fp32);
    EXPECT_GE(figure(r.out, "grad_rel_err"), 0);
    EXPECT_LE(figure(r.out, "grad_rel_err"), std::max(1e-6, 2 * grad_noise));
    EXPECT_GE(figure(r.out, "loss_rel_err"), 0);
    EXPECT_LE(figure(r.out, "loss_rel_err"), std::max(1e-6, 2 * figure(r.out, "loss_noise_single_rank")));
    EXPECT_GE(figure(r.out, "train_loss_rel_err"), 0);
    EXPECT_LE(figure(r.out, "train_loss_rel_err"),
              std::min(1e-3, std::max(1e-6, 2 * figure(r.out, "train_loss_noise_single_rank"))));
    EXPECT_GE(figure(r.out, "weights_rel_err"), 0);
    EXPECT_LE(figure(r.out, "weights_rel_err"), std::max(1e-4, 2 * figure(r.out, "weights_noise_single_rank")));
    EXPECT_EQ(figure(r.out, "plan_mismatches"), 0);
    EXPECT_EQ(figure(r.out, "kv_per_rank_vs_single_over_sp"), 0);
    if (args.empty()) continue;
    EXPECT_EQ(figure(r.out, "head_chunks_vs_one_differing"), 0);
    EXPECT_EQ(figure(r.out, "head_chunks_vs_one_trained_differing"), 0);
    EXPECT_EQ(figure(r.out, "head_chunk_saving_vs_plan_mismatches"), 0);
    EXPECT_GT(figure(r.out, "head_chunk_saving_bytes"), 0);
  }
}

// The negative control: the exchange back putting group j's rows in another group's columns is
// seen by the bitwise comparison (and by the single rank's), in fp32 and within bf16's noise bound.
TEST(Dist, HeadChunksCheckSeesAWrongGrouping) {
  NEED_MPI();
  for (const char* precision : {"", " --precision bf16 --bf16-order-noise"}) {
    const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() +
                                      " --sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --group-fault --steps 1" +
                                      precision);
    SCOPED_TRACE(precision);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_GT(figure(r.out, "head_chunks_vs_one_differing"), 0) << r.out;
    EXPECT_GT(figure(r.out, "grad_rel_err"), std::max(1e-3, 2 * figure(r.out, "grad_noise_single_rank"))) << r.out;
  }
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
  EXPECT_EQ(r.code, 2);  // (refused as the command line is read)
  EXPECT_NE(r.out.find("--sp-head-chunks: must be a whole number from 1"), std::string::npos) << r.out;
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

// --keep-attention with --sp: each rank keeps its heads' attention outputs for every chunk (N rows,
// H/P heads); within 1e-6 of one rank keeping them, the plan equal to every rank's peaks; with head
// groups, K = 1's bits on the same ranks. Both orders, pages resident and offloaded, and the kept
// outputs offloaded (--offload attention: each rank's through its own device slots).
TEST(Dist, KeepingAttentionWithSequenceParallel) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--sp 2 --keep-attention --doc-mask");
  expect_equal_to_single_rank(2, "--sp 2 --keep-attention --device sim --offload kv,attention --doc-mask");
  expect_equal_to_single_rank(2, "--sp 2 --keep-attention --sweep layer --device sim --offload kv");
  expect_head_chunks_equal_to_one(2, "--sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --keep-attention");
}

// Granite's multipliers on ranks (the token side scales the embedding, both branches and the lm_head's
// input, the attention side's softmax takes attention_multiplier): --sp keeping attention in the layer
// order with --doc-mask, and ZeRO-3 with the parameters offloaded, each against the single rank.
TEST(Dist, GraniteOnRanks) {
  NEED_MPI();
  const CmdResult r = expect_equal_to_single_rank(2, "--sp 2 --arch granite --keep-attention --sweep layer --doc-mask");
  EXPECT_EQ(figure(r.out, "layer_vs_chunk_order_differing"), 0);
  expect_equal_to_single_rank(2, "--dp 2 --grad-accum 2 --zero 3 --arch granite --tie --device sim --offload kv,params",
                              "OOMB_GRAD_SYNC_PIECE=1000");
}

// OLMo 2's post-norms and whole-projection q/k norms on ranks (the token side holds every head of
// its tokens, so the q/k norms see whole rows): --sp with head chunks, --sp keeping attention in the
// layer order with --doc-mask, and ZeRO-3 with the parameters offloaded, each against the single rank.
TEST(Dist, Olmo2OnRanks) {
  NEED_MPI();
  expect_head_chunks_equal_to_one(2, "--sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --arch olmo2");
  const CmdResult r = expect_equal_to_single_rank(2, "--sp 2 --arch olmo2 --keep-attention --sweep layer --doc-mask");
  EXPECT_EQ(figure(r.out, "layer_vs_chunk_order_differing"), 0);
  expect_equal_to_single_rank(2, "--dp 2 --grad-accum 2 --zero 3 --arch olmo2 --device sim --offload kv,params",
                              "OOMB_GRAD_SYNC_PIECE=1000");
}

// Gemma 3's four norms (1 + w), per-head q/k norms, GeGLU and its sliding layer's own RoPE on ranks: --sp
// keeping attention in the layer order with --doc-mask against the single rank.
TEST(Dist, Gemma3OnRanks) {
  NEED_MPI();
  const CmdResult r = expect_equal_to_single_rank(2, "--sp 2 --arch gemma3_text --keep-attention --sweep layer --doc-mask");
  EXPECT_EQ(figure(r.out, "layer_vs_chunk_order_differing"), 0);
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
  // two held-out sets on --dp 2 (tokens.bin over 6 windows, other.bin over 4: --windows per set): the
  // ranks deal the 10 windows of both and add each set's sums apart, so each set scores as its file
  // alone does on one rank
  write_tokens(dir / "other.bin", 2000, 120, 9);
  const auto other_out = dir / "eval_other.json";
  std::string alone = eval;
  alone.replace(alone.find("tokens.bin"), 10, "other.bin");
  alone.replace(alone.find("--windows 6"), 11, "--windows 4");
  const nlohmann::json other =
      result(run_cmd_in(dir, fmt::format("OMP_NUM_THREADS=1 {} --out {}", alone, other_out.string())), other_out);
  const nlohmann::json two = on_ranks(2, fmt::format("--dp 2 --data {}/other.bin --windows 4", dir.string()));
  ASSERT_FALSE(two.is_discarded());
  EXPECT_EQ(two["windows"], 10);
  ASSERT_EQ(two["sets"].size(), 2u) << two.dump();
  EXPECT_EQ(two["targets"].get<int64_t>(), ref["targets"].get<int64_t>() + other["targets"].get<int64_t>());
  for (size_t s = 0; s < 2; ++s) {
    const nlohmann::json& want = s == 0 ? ref : other;
    EXPECT_EQ(two["sets"][s]["windows"], want["windows"]) << "set " << s;
    EXPECT_EQ(two["sets"][s]["targets"], want["targets"]) << "set " << s;
    EXPECT_NEAR(two["sets"][s]["loss"].get<double>(), want["loss"].get<double>(), 1e-6 * want["loss"].get<double>())
        << "set " << s;
  }
  EXPECT_GT(std::abs(other["loss"].get<double>() - ref["loss"].get<double>()), 1e-4 * ref["loss"].get<double>())
      << "the two files score alike: a swap of their sums would not show";
  // control: fewer windows change the figures this compares
  std::string four = eval;
  four.replace(four.find("--windows 6"), 11, "--windows 4");
  const auto four_out = dir / "eval_four.json";
  EXPECT_NE(result(mpirun(2, fmt::format("{} --dp 2 --out {}", four, four_out.string())), four_out)["loss"], ref["loss"]);
  const CmdResult passkey = mpirun(2, fmt::format("{} eval --model {}/m --passkey --sp 2", oomb, dir.string()));
  EXPECT_NE(passkey.code, 0);
  EXPECT_NE(passkey.out.find("--passkey with --sp/--dp: not supported"), std::string::npos) << passkey.out;
}

// --lora-dropout under --sp 2: each rank draws the masks of its own tokens' sequence positions, so
// two ranks train one rank's steps (fp32, within 1e-6); without the flag the losses from step 2 on
// are others (the masks matter, and a rank drawing the other's rows would show).
TEST(Dist, LoraDropoutWithSequenceParallel) {
  NEED_MPI();
  const auto dir = temp_dir("dist_lora_dropout");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string run = fmt::format("{} train --model {}/m --data {}/tokens.bin --seq-len 128 --chunk-size 32 "
                                      "--page-size 16 --steps 3 --lr 1e-2 --lora-rank 4 --lora-targets all --metrics ",
                                      oomb, dir.string(), dir.string());
  auto losses = [&](const std::string& name) {
    std::vector<double> v;
    for (const nlohmann::json& j : metrics_lines(dir / name)) v.push_back(j["loss"].get<double>());
    return v;
  };
  const std::string drop = " --lora-dropout 0.3";
  ASSERT_EQ(run_cmd_in(dir, run + (dir / "one.jsonl").string() + drop).code, 0);
  ASSERT_EQ(run_cmd_in(dir, run + (dir / "none.jsonl").string()).code, 0);
  const CmdResult r = mpirun(2, run + (dir / "two.jsonl").string() + drop + " --sp 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto one = losses("one.jsonl"), two = losses("two.jsonl"), none = losses("none.jsonl");
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(two.size(), 3u);
  ASSERT_EQ(none.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(two[k], one[k], 1e-6 * one[k]) << "step " << k + 1;
  EXPECT_GT(std::abs(none[2] - one[2]), 1e-4 * one[2]) << "dropout changed nothing by step 3";
}

// oomb train --eval-data on ranks: --dp 2 shares the held-out windows (every whole window, rounded
// down to a multiple of --dp: 6 of 7) and adds the sums, giving `oomb eval`'s loss of the saved
// model; --sp 2 evaluates each window on both ranks of the group, as training does.
TEST(Dist, HeldOutLossDuringTrainingOnRanks) {
  NEED_MPI();
  const auto dir = temp_dir("dist_train_eval");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  write_tokens(dir / "e.bin", 1000, 120, 6);
  const std::string run = fmt::format("{} train --model {}/m --data {}/tokens.bin --seq-len 128 --chunk-size 32 "
                                      "--steps 2 --lr 1e-2 --eval-data {}/e.bin ", oomb, dir.string(), dir.string(),
                                      dir.string());
  const CmdResult r = mpirun(2, run + "--dp 2 --out " + (dir / "out").string() + " --metrics " +
                                    (dir / "dp.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("6 windows of 128 tokens"), std::string::npos) << r.out;
  const nlohmann::json last = last_metrics_line(dir / "dp.jsonl");
  const CmdResult e = run_cmd_in(dir, fmt::format("{} eval --model {}/out --data {}/e.bin --seq-len 128 --chunk-size 32 "
                                                  "--windows 6 --json", oomb, dir.string(), dir.string()));
  ASSERT_EQ(e.code, 0) << e.out;
  const double want = nlohmann::json::parse(e.out.substr(e.out.find('{')))["loss"];
  EXPECT_NEAR(last["eval"]["loss"].get<double>(), want, 1e-7 * want);
  EXPECT_EQ(last["eval"]["targets"], 6 * 128);
  // --sp 2 against one rank (fp32: within 1e-6, as the training's losses)
  auto eval_loss = [&](const std::string& name) { return last_metrics_line(dir / name)["eval"]["loss"].get<double>(); };
  const CmdResult sp = mpirun(2, run + "--sp 2 --eval-windows 3 --metrics " + (dir / "sp.jsonl").string());
  ASSERT_EQ(sp.code, 0) << sp.out;
  ASSERT_EQ(run_cmd_in(dir, run + "--eval-windows 3 --metrics " + (dir / "one.jsonl").string()).code, 0);
  EXPECT_NEAR(eval_loss("sp.jsonl"), eval_loss("one.jsonl"), 1e-6 * eval_loss("one.jsonl"));
  // windows not a multiple of --dp: refused before the model is built
  const CmdResult odd = mpirun(2, run + "--dp 2 --eval-windows 3");
  EXPECT_NE(odd.code, 0);
  EXPECT_NE(odd.out.find("--eval-windows 3: must be a multiple of --dp 2"), std::string::npos) << odd.out;
}
