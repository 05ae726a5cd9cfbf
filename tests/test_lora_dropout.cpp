// --lora-dropout: PEFT's dropout on each adapter's input. The op's mask (drops about p, scales the
// rest, depends on the value's place and nothing else), the same bits in every order and place a
// step may run, none in evaluation, and the flag through the command line and PEFT's config. The
// math against PyTorch in float64: test_oracle's Oracle.LoraDropout; CUDA's op: test_cuda_ops.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <cstring>
#include <fstream>
#include <cmath>
#include <map>
#include <memory>

#include "backend/backend.h"
#include "core/dtype.h"
#include "model/lora.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/model.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

Tensor host(std::vector<float>& v, int64_t T, int64_t n) { return Tensor(v.data(), DType::F32, {T, n}, Tier::Host); }

}  // namespace

// The mask on a (512, 256) input at p = 0.25: about a quarter dropped overall and in every row and
// column (a draw ignoring the row or the feature would drop whole columns or rows), the kept values
// x / (1 - p) exactly; another module's mask is another draw; rows taken from position 100 equal
// the whole's rows there (a chunk draws what the sequence draws); bf16 out is f32 out rounded;
// accumulating adds the same values; p = 0 keeps everything as it is.
TEST(LoraDropout, MaskDropsAboutPAndScalesTheRest) {
  auto be = make_cpu_backend();
  const int64_t T = 512, n = 256;
  std::vector<float> x = randn(size_t(T * n), 1), y(x.size()), y2(x.size());
  Tensor X = host(x, T, n), Y = host(y, T, n), Y2 = host(y2, T, n);
  const double p = 0.25;
  const uint64_t key = dropout_module_key(dropout_window_key(9, 2), 1, 3);
  const DropoutMask m = dropout_mask(key, 40, p);
  be->dropout(X, m, Y, false);
  int64_t dropped = 0;
  std::vector<int64_t> per_row(static_cast<size_t>(T)), per_col(static_cast<size_t>(n));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) {
      const size_t e = size_t(t * n + i);
      if (y[e] == 0.0f) {
        ++dropped, ++per_row[size_t(t)], ++per_col[size_t(i)];
      } else {
        ASSERT_EQ(y[e], x[e] * float(1.0 / (1.0 - p))) << t << ", " << i;
      }
    }
  const double frac = double(dropped) / double(T * n);
  EXPECT_NEAR(frac, p, 0.01);  // sd 0.0012
  for (int64_t c : per_col) EXPECT_NEAR(double(c) / double(T), p, 0.1);  // sd 0.019
  for (int64_t r : per_row) EXPECT_NEAR(double(r) / double(n), p, 0.14);  // sd 0.027
  // another module (layer 1, target 4): agreeing on about p^2 + (1 - p)^2 = 0.625 of the places
  be->dropout(X, dropout_mask(dropout_module_key(dropout_window_key(9, 2), 1, 4), 40, p), Y2, false);
  int64_t same = 0;
  for (size_t e = 0; e < y.size(); ++e) same += (y[e] == 0.0f) == (y2[e] == 0.0f);
  EXPECT_NEAR(double(same) / double(y.size()), 0.625, 0.01);
  // rows [100, 200) on their own, their first at sequence position 40 + 100
  std::vector<float> part(x.begin() + 100 * n, x.begin() + 200 * n), part_y(part.size());
  Tensor P = host(part, 100, n), PY = host(part_y, 100, n);
  be->dropout(P, dropout_mask(key, 140, p), PY, false);
  EXPECT_EQ(std::memcmp(part_y.data(), y.data() + 100 * n, part_y.size() * 4), 0);
  // bf16 out: the f32 values rounded
  std::vector<uint16_t> h(x.size());
  Tensor H(h.data(), DType::BF16, {T, n}, Tier::Host);
  be->dropout(X, m, H, false);
  for (size_t e = 0; e < y.size(); ++e) ASSERT_EQ(h[e], f32_to_bf16(y[e])) << e;
  // accumulated: y2 + the same values
  std::vector<float> acc = randn(x.size(), 2), want(acc);
  for (size_t e = 0; e < y.size(); ++e) want[e] += y[e];
  Tensor A = host(acc, T, n);
  be->dropout(X, m, A, true);
  EXPECT_EQ(std::memcmp(acc.data(), want.data(), acc.size() * 4), 0);
  // p = 0
  be->dropout(X, dropout_mask(key, 0, 0.0), Y, false);
  EXPECT_EQ(std::memcmp(y.data(), x.data(), x.size() * 4), 0);
}

namespace {
// A model of dir with LoRA on every linear (B random, so that every adapter reaches the loss), the
// embeddings and norms trainable too (so the embedding's gradient comes through every layer's
// input gradient), dropout p, chunks of C.
std::unique_ptr<Model> dropout_model(Backend& be, const std::filesystem::path& dir, int64_t C, double p) {
  const ModelConfig cfg = load_config(dir);
  ChunkPlan c{C, 8};
  c.lora.rank = 4;
  c.lora.dropout = p;
  c.lora.train_embeddings_norms = true;
  parse_lora_targets("all", c.lora);
  auto m = std::make_unique<Model>(cfg, be, c);
  load_for_training(*m, dir);
  start_lora(*m, dir, c);
  Params host(cfg, m->trainable().specs(), Tier::Host, Tag::IO);
  m->download_trainable(host);
  const std::vector<float> r = randn(size_t(host.flat().numel()), 8, 0.3f);
  for (const ParamSpec& s : host.specs())
    if (s.name.find(".lora_") != std::string::npos)
      for (int64_t i = s.offset; i < s.offset + s.numel(); ++i) host.flat().f()[i] += r[size_t(i)];
  m->upload_trainable(host);
  m->set_dropout_key(dropout_window_key(4, 1));
  m->enable_grads();
  return m;
}
}  // namespace

// Without PyTorch (test_oracle holds the whole step to PyTorch's float64 where it exists): a chunk
// draws the sequence's masks (chunks of 8 against one chunk of 40: the loss within 1e-6, every
// gradient within 1e-5), and the gradient is the loss's (central differences of the training loss,
// with its masks, along the embedding's gradient: within 1%, which the adapters' share of the
// embedding's gradient, x's gradient through the masks, is far above).
TEST(LoraDropout, ChunksDrawTheSequencesMasksAndTheGradientIsTheLosss) {
  const auto dir = temp_dir("_lora_dropout_fd");
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("llama", 2), 12);
  auto be = make_cpu_backend();
  const int64_t N = 40;
  const auto t = step_tokens(N + 1, 9, cfg.vocab);
  auto whole = dropout_model(*be, dir, N, 0.3), chunked = dropout_model(*be, dir, 8, 0.3);
  const double lw = whole->forward_backward(t.data(), t.data() + 1, N, 1.0f).loss_sum / double(N);
  const double lc = chunked->forward_backward(t.data(), t.data() + 1, N, 1.0f).loss_sum / double(N);
  EXPECT_NEAR(lc, lw, 1e-6 * lw);
  const std::vector<float> gw = on_host(*be, whole->grads()), gc = on_host(*be, chunked->grads());
  EXPECT_LE(rel_error(gc, gw), 1e-5);
  // along g, the embedding's gradient (unit length): the derivative is |g|
  Params host(cfg, whole->trainable().specs(), Tier::Host, Tag::IO), g(cfg, whole->grads().specs(), Tier::Host, Tag::IO);
  whole->download_trainable(host);
  std::memcpy(g.flat().data, gw.data(), gw.size() * 4);
  const ParamSpec* emb = nullptr;
  for (const ParamSpec& s : host.specs())
    if (s.name == "model.embed_tokens.weight") emb = &s;
  ASSERT_NE(emb, nullptr);
  double norm = 0;
  for (int64_t i = emb->offset; i < emb->offset + emb->numel(); ++i) norm += double(g.flat().f()[i]) * g.flat().f()[i];
  norm = std::sqrt(norm);
  ASSERT_GT(norm, 0);
  auto loss_at = [&](double eps) {
    Params moved(cfg, whole->trainable().specs(), Tier::Host, Tag::IO);
    std::memcpy(moved.flat().data, host.flat().data, host.flat().bytes());
    for (int64_t i = emb->offset; i < emb->offset + emb->numel(); ++i)
      moved.flat().f()[i] += float(eps * g.flat().f()[i] / norm);
    whole->upload_trainable(moved);
    return whole->forward_backward(t.data(), t.data() + 1, N, 1.0f).loss_sum / double(N);
  };
  const double eps = 1e-4, fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
  EXPECT_NEAR(fd, norm, 1e-2 * norm) << "central differences against the gradient's norm";
  std::cout << fmt::format("[ dropout  ] chunks of 8 vs one of 40: loss {:.1e}, gradients {:.1e}; the embedding's "
                           "gradient norm {:.6f}, central differences {:.6f}\n", std::abs(lc - lw) / lw,
                           rel_error(gc, gw), norm, fd);
}

// Training with dropout gives the same bits whatever runs the step: the CPU or the simulated device,
// the chunk or the layer order, parameters and pages resident or offloaded, attention kept or not
// (3 AdamW steps of 2 sequences; fp32 and bf16). The masks follow the windows (each its own) and
// the flag matters: without it the run differs.
TEST(LoraDropout, SameBitsInEveryOrderAndPlace) {
  const auto root = temp_dir("_lora_dropout");
  const int64_t N = 37;
  for (const std::string arch : {"qwen2", "llama"}) {
    const auto dir = root / arch;
    write_tiny_model(dir, tiny_config_json(arch, arch == "qwen2" ? 2 : 1), arch == "qwen2" ? 5 : 6);
    for (const DType precision : {DType::F32, DType::BF16}) {
      auto plan = [&](double p) {
        ChunkPlan c{13, 8};
        c.precision = precision;
        c.lora.rank = 4;
        c.lora.alpha = 8;
        c.lora.dropout = p;
        parse_lora_targets("all", c.lora);
        return c;
      };
      auto sim = make_sim_backend(0, 100);
      auto cpu = make_cpu_backend();
      const Trained ref = train_steps(*sim, dir, plan(0.2), "adamw", N, 3, 2);
      struct Variant {
        const char* name;
        ChunkPlan plan;
        Backend* be;
      };
      std::vector<Variant> vs;
      vs.push_back({"--device cpu", plan(0.2), cpu.get()});
      ChunkPlan layer = plan(0.2);
      layer.sweep = SweepOrder::Layer;
      vs.push_back({"--sweep layer", layer, sim.get()});
      ChunkPlan params = plan(0.2);
      params.offload_params = true;
      vs.push_back({"--offload params", params, sim.get()});
      ChunkPlan kv_params = params;
      kv_params.offload_kv = true, kv_params.offload_group = 2, kv_params.sweep = SweepOrder::Layer;
      vs.push_back({"--offload kv,params --sweep layer", kv_params, sim.get()});
      ChunkPlan keep = plan(0.2);
      keep.keep_attention = N;
      vs.push_back({"--keep-attention", keep, sim.get()});
      for (const Variant& v : vs) {
        SCOPED_TRACE(fmt::format("{} {} {}", arch, dtype_name(precision), v.name));
        EXPECT_EQ(difference(ref, train_steps(*v.be, dir, v.plan, "adamw", N, 3, 2)), "");
      }
      SCOPED_TRACE(fmt::format("{} {}", arch, dtype_name(precision)));
      EXPECT_NE(difference(ref, train_steps(*sim, dir, plan(0.0), "adamw", N, 3, 2)), "") << "dropout changed nothing";
    }
  }
}

// Evaluation drops nothing: a model planned with dropout evaluates as one without it, bit for bit,
// while its training loss on the same tokens is another.
TEST(LoraDropout, EvaluationDropsNothing) {
  const auto dir = temp_dir("_lora_dropout_eval");
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("qwen2", 2), 7);
  auto be = make_cpu_backend();
  const auto t = step_tokens(41, 3, cfg.vocab);
  auto run = [&](double p, bool train) {
    ChunkPlan c{16, 8};
    c.lora.rank = 4;
    c.lora.dropout = p;
    parse_lora_targets("all", c.lora);
    Model m(cfg, *be, c);
    load_for_training(m, dir);
    start_lora(m, dir, c);
    // B nonzero, so that the adapters' inputs reach the loss
    Params host(cfg, m.trainable().specs(), Tier::Host, Tag::IO);
    m.download_trainable(host);
    const std::vector<float> r = randn(size_t(host.flat().numel()), 8, 0.3f);
    for (int64_t i = 0; i < host.flat().numel(); ++i) host.flat().f()[i] += r[size_t(i)];
    m.upload_trainable(host);
    m.set_dropout_key(dropout_window_key(0, 0));
    if (!train) return m.evaluate(t.data(), t.data() + 1, 40).loss_sum;
    m.enable_grads();
    return m.forward_backward(t.data(), t.data() + 1, 40, 1.0f).loss_sum;
  };
  const double eval_with = run(0.3, false), eval_without = run(0.0, false), train_with = run(0.3, true);
  EXPECT_EQ(eval_with, eval_without);
  EXPECT_EQ(run(0.0, true), eval_without) << "(training without dropout: the evaluation's loss)";
  EXPECT_GT(std::abs(train_with - eval_with), 1e-4 * std::abs(eval_with)) << "dropout changed no training loss";
}

// The command line: --lora-dropout trains and is written to the adapter's config as PEFT's
// lora_dropout; --lora DIR takes it as its default, and --lora-dropout replaces it; out of [0, 1)
// it is refused naming the flag; a checkpoint resumed with another dropout is refused naming it.
TEST(LoraDropout, TheFlagThroughTheCommandLineAndPeftsConfig) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string(), ad = (dir / "ad").string(), ad2 = (dir / "ad2").string(),
             ck = (dir / "ck").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  const std::string run = fmt::format("train --model {} --data {}/t.bin --seq-len 128 --chunk-size 32 --steps 2 ", m,
                                      dir.string());
  const CmdResult a = oomb_cmd(dir, run + "--lora-rank 4 --lora-dropout 0.1 --out " + ad);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_THAT(a.out, HasSubstr("dropout 0.1"));
  auto dropout_of = [](const std::string& adapter) {
    nlohmann::json j;
    std::ifstream(std::filesystem::path(adapter) / "adapter_config.json") >> j;
    return j.at("lora_dropout").get<double>();
  };
  EXPECT_EQ(dropout_of(ad), 0.1);
  const CmdResult b = oomb_cmd(dir, run + "--lora " + ad + " --out " + ad2 + " --force");
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_THAT(b.out, HasSubstr("dropout 0.1"));
  EXPECT_EQ(dropout_of(ad2), 0.1);
  const CmdResult c = oomb_cmd(dir, run + "--lora " + ad + " --lora-dropout 0.05 --out " + ad2 + " --force");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(dropout_of(ad2), 0.05);
  EXPECT_THAT(oomb_cmd(dir, run + "--lora-rank 4 --lora-dropout 1").out,
              HasSubstr("--lora-dropout: must be in [0, 1), got 1"));
  EXPECT_THAT(oomb_cmd(dir, run + "--lora-dropout 0.1").out, HasSubstr("--lora-dropout needs --lora-rank"));
  // a checkpoint of a dropout run, resumed without it (refused, naming the flag) and with it
  const std::string run3 = fmt::format("train --model {} --data {}/t.bin --seq-len 128 --chunk-size 32 --steps 3 "
                                       "--lora-rank 4 --resume {}/step-000001 ", m, dir.string(), ck);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 128 --chunk-size 32 --steps 3 "
                                      "--lora-rank 4 --lora-dropout 0.1 --checkpoint-dir {} --save-every 1", m,
                                      dir.string(), ck)).code, 0);
  const CmdResult without = oomb_cmd(dir, run3);
  EXPECT_NE(without.code, 0);
  EXPECT_THAT(without.out, HasSubstr("--lora-dropout"));
  const CmdResult with = oomb_cmd(dir, run3 + "--lora-dropout 0.1");
  EXPECT_EQ(with.code, 0) << with.out;
  EXPECT_THAT(with.out, HasSubstr("dropout 0.1; the adapters come from the checkpoint"));
  // 0, every run's default, may be named without LoRA (a config file's)
  EXPECT_EQ(oomb_cmd(dir, run + "--lora-dropout 0").code, 0);
}

// Dropout needs no memory of its own (the dropped input and x's gradient through the mask use the
// adapter's output scratch): every (tier, tag) peak of a run with it equals the run's without it,
// and the plan; resident and with --offload kv,params, fp32 and bf16, every target adapted.
TEST(LoraDropout, NeedsNoMemoryOfItsOwn) {
  Accountant& acc = Accountant::global();
  const ModelConfig cfg = parse_config(tiny_config_json("qwen2", 2), "LoRA dropout memory test config");
  for (const bool offload : {false, true})
    for (const DType precision : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(fmt::format("{}{}", dtype_name(precision), offload ? " --offload kv,params" : ""));
      std::map<std::pair<int, int>, int64_t> peaks[2];
      for (const double p : {0.0, 0.2}) {
        ChunkPlan plan{64, 16};
        plan.offload_kv = plan.offload_params = offload;
        plan.offload_group = offload ? 2 : 0;
        plan.precision = precision;
        plan.lora.rank = 4;
        plan.lora.dropout = p;
        parse_lora_targets("all", plan.lora);
        acc.reset_peaks();
        expect_peaks_equal(train_for_peaks(cfg, plan, 256, true, 2));
        for (Tier tier : kTiers)
          for (int i = 0; i < kNumTags; ++i) peaks[p > 0][{int(tier), i}] = acc.get(tier, Tag(i)).peak;
      }
      EXPECT_EQ(peaks[0], peaks[1]);
      EXPECT_GT((peaks[1][{int(Tier::Device), int(Tag::Activations)}]), 0);
    }
}
