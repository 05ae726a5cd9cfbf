// Chunk-recurrent training equals full-sequence training: loss and every gradient, over a grid of
// sequence lengths (primes among them), chunk sizes, page sizes, kv-head ratios and architectures.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <set>

#include "backend/backend.h"
#include "hf/checkpoint.h"
#include "train/model.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {
double g_worst_loss = 0;  // the largest relative loss difference seen by the chunked-vs-full checks
double loss_gap(double a, double b) {
  const double e = std::abs(a - b) / std::abs(b);
  g_worst_loss = std::max(g_worst_loss, e);
  return e;
}

struct ChunkRun {
  double loss;
  std::vector<float> grads;
};

nlohmann::json with_json(nlohmann::json j, const char* key, const nlohmann::json& v) {
  j[key] = v;
  return j;
}

// full_attention_pages: check the page counts of full attention (every layer's N - C gradient tokens)
ChunkRun run(const std::filesystem::path& dir, const std::vector<int32_t>& toks, int64_t N, ChunkPlan plan,
             bool full_attention_pages = true) {
  auto be = make_cpu_backend();
  const ModelConfig cfg = load_config(dir);
  Model m(cfg, *be, plan);
  load_weights(dir, cfg, m.params());
  m.enable_grads();
  const LossStats ls = m.forward_backward(toks.data(), toks.data() + 1, N, 1.0f);
  // K/V pages for every token of every layer; gradient pages only for the N - C tokens before the last chunk
  const int64_t P = plan.page_size, C = std::min(plan.chunk, N);
  EXPECT_EQ(m.kv_grad().shape().dtype, plan.kv_grad_dtype);
  EXPECT_EQ(m.kv().shape().dtype, plan.kv_dtype);
  EXPECT_EQ(m.kv().pages_reserved(), cfg.layers * ((N + P - 1) / P));
  if (full_attention_pages) {
    EXPECT_EQ(m.kv_grad().pages_reserved(), cfg.layers * ((N - C + P - 1) / P));
  }
  EXPECT_EQ(m.kv().pages_in_use(), 0) << "K/V pages left after the backward sweep";
  EXPECT_EQ(m.kv_grad().pages_in_use(), 0) << "gradient pages left after the backward sweep";
  const Tensor& g = m.grads().flat();
  return {ls.loss_sum / double(ls.targets), std::vector<float>(g.f(), g.f() + g.numel())};
}

TEST(Chunked, EqualsFullSequenceOverTheGrid) {
  int cases = 0;
  double worst = 0;
  for (std::string arch : {"llama", "qwen2"})
    for (int64_t G : {4, 2, 1}) {
      const auto dir = temp_dir(fmt::format("_{}_{}", arch, G));
      write_tiny_model(dir, tiny_config_json(arch, G), 21 + uint64_t(G));
      const auto toks = write_tokens(dir / "t.bin", 132, 61, 22);
      for (int64_t N : {37, 64, 97, 131}) {
        const ChunkRun full = run(dir, toks, N, {N, 16});
        const ModelConfig cfg = load_config(dir);
        Params specs(cfg, Tier::Host, Tag::Workspace);  // for per-tensor comparison
        for (int64_t P : {16, 64, 128}) {
          std::set<int64_t> Cs = {N, N / 2, 13, 29, P, std::max<int64_t>(1, P / 2 - 3)};
          for (int64_t C : Cs) {
            if (C <= 0 || C > N) continue;
            SCOPED_TRACE(fmt::format("{} G={} N={} C={} P={}", arch, G, N, C, P));
            const ChunkRun r = run(dir, toks, N, {C, P});
            EXPECT_LE(loss_gap(r.loss, full.loss), 1e-7);  // measured <= 2.0e-8
            for (const ParamSpec& s : specs.specs()) {
              const double e = rel_error(r.grads.data() + s.offset, full.grads.data() + s.offset, size_t(s.numel()));
              EXPECT_LE(e, 1e-5) << s.name;  // measured <= 1.9e-6 (printed below)
              worst = std::max(worst, e);
            }
            ++cases;
          }
        }
      }
    }
  std::cout << fmt::format("[ chunked  ] {} configurations, worst gradient rel. error vs full sequence {:.2e}\n",
                           cases, worst);
}

// Qwen3 (q/k norms, head_dim apart from hidden / heads) through the same chunked code.
TEST(Chunked, Qwen3EqualsFullSequence) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("qwen3", 2), 41);
  const auto toks = write_tokens(dir / "t.bin", 132, 61, 42);
  double worst = 0;
  for (int64_t N : {37, 97}) {
    const ChunkRun full = run(dir, toks, N, {N, 16});
    for (auto [C, P] : {std::pair<int64_t, int64_t>{13, 16}, {29, 7}, {N / 2, 64}}) {
      SCOPED_TRACE(fmt::format("N={} C={} P={}", N, C, P));
      const ChunkRun r = run(dir, toks, N, {C, P});
      EXPECT_LE(loss_gap(r.loss, full.loss), 1e-7);  // measured <= 1.3e-8
      worst = std::max(worst, rel_error(r.grads, full.grads));
    }
  }
  EXPECT_LE(worst, 4e-6);  // measured 8.1e-7 (printed below)
  std::cout << fmt::format("[ chunked  ] qwen3: worst whole-gradient rel. error vs full sequence {:.2e}\n", worst);
}

// A sliding window: chunked equals full sequence, and gradient pages exist only where a chunk's
// window reaches (the pages of about window + page tokens per layer, not all N - C): the measured
// kv_grad peak equals the plan and is below full attention's.
TEST(Chunked, SlidingWindowKeepsFewerGradientPages) {
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir, with_json(tiny_config_json("mistral", 2), "sliding_window", 9), 43);
  ASSERT_EQ(cfg.layer_window, std::vector<int64_t>(2, 9));
  const auto toks = write_tokens(dir / "t.bin", 132, 61, 44);
  const int64_t N = 131, P = 4;
  const ChunkRun full = run(dir, toks, N, {N, P});
  for (int64_t C : {13, 5, 9}) {
    SCOPED_TRACE(fmt::format("C={}", C));
    Accountant::global().reset_peaks();
    const int64_t before = Accountant::global().get(Tier::Host, Tag::KVGrad).current;
    const ChunkRun r = run(dir, toks, N, {C, P}, false);
    EXPECT_LE(loss_gap(r.loss, full.loss), 1e-7);  // measured <= 8.0e-9
    EXPECT_LE(rel_error(r.grads, full.grads), 3e-6);  // measured <= 6.7e-7
    const int64_t measured = Accountant::global().get(Tier::Host, Tag::KVGrad).peak - before;
    const MemoryPlan plan = plan_memory(cfg, {C, P}, N, "sgd", 0);
    EXPECT_EQ(measured, plan.get(Tier::Host, Tag::KVGrad));
    // a page of K and V gradients is 2 x 4 tokens x 2 heads x 8 x 4 B = 512 B; a chunk's window
    // reaches back 8 tokens: at most ceil((8 + C) / 4) + 1 pages per layer, against 32 for N - C
    const int64_t page = 2 * P * 2 * 8 * 4;
    EXPECT_LE(measured, 2 * ((8 + C + P - 1) / P + 1) * page);
    EXPECT_LT(measured, 2 * ((N - C + P - 1) / P) * page);
  }
}

TEST(Chunked, Bf16GradientPagesStayCloseAndTakeHalfTheBytes) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 31);
  const auto toks = write_tokens(dir / "t.bin", 132, 61, 32);
  const int64_t N = 131;
  const ChunkRun full = run(dir, toks, N, {N, 16});
  double worst = 0;
  for (int64_t C : {13, 32}) {
    const ChunkRun r = run(dir, toks, N, {C, 16, DType::BF16});
    EXPECT_LE(loss_gap(r.loss, full.loss), 1e-7);  // measured <= 1.9e-9: the forward reads no gradient page
    worst = std::max(worst, rel_error(r.grads, full.grads));
  }
  EXPECT_LE(worst, 4e-3);  // measured 1.0e-3: bf16 keeps 8 bits of mantissa; each page rounded once per chunk
  EXPECT_GT(worst, 1e-7);  // and it does round: the pages are really bf16
  std::cout << fmt::format("[ chunked  ] bf16 gradient pages: worst whole-gradient rel. error {:.2e}\n", worst);
  const ModelConfig cfg = load_config(dir);
  auto ws = make_cpu_backend()->workspace_bytes(workspace_shape(cfg, 256));
  const MemoryPlan f32 = plan_memory(cfg, {13, 16}, N, "adamw", ws), bf16 = plan_memory(cfg, {13, 16, DType::BF16}, N, "adamw", ws);
  EXPECT_EQ(2 * bf16.get(Tier::Host, Tag::KVGrad), f32.get(Tier::Host, Tag::KVGrad));
  EXPECT_EQ(bf16.get(Tier::Host, Tag::KV), f32.get(Tier::Host, Tag::KV));
}

// --kv-dtype bf16: K and V are rounded to bf16 in every chunk, so chunked training reads from bf16
// pages exactly the values full-sequence training rounds to: the two agree as tightly as in f32.
// Against f32 K/V they differ by bf16's rounding; the K/V pages take half the bytes.
TEST(Chunked, Bf16KvPagesEqualFullSequenceAndTakeHalfTheBytes) {
  double worst_chunked = 0, worst_vs_f32 = 0, worst_loss_vs_f32 = 0;
  for (int64_t G : {2, 1}) {
    const auto dir = temp_dir(fmt::format("_{}", G));
    write_tiny_model(dir, tiny_config_json(G == 1 ? "llama" : "qwen2", G), 41 + uint64_t(G));
    const auto toks = write_tokens(dir / "t.bin", 132, 61, 42);
    const int64_t N = 131;
    ChunkPlan full_plan{N, 16};
    full_plan.kv_dtype = DType::BF16;
    const ChunkRun full = run(dir, toks, N, full_plan), full32 = run(dir, toks, N, {N, 16});
    for (auto [C, P] : {std::pair<int64_t, int64_t>{13, 16}, {32, 16}, {29, 64}}) {
      SCOPED_TRACE(fmt::format("G={} C={} P={}", G, C, P));
      ChunkPlan plan{C, P};
      plan.kv_dtype = DType::BF16;
      const ChunkRun r = run(dir, toks, N, plan);
      EXPECT_LE(loss_gap(r.loss, full.loss), 1e-7);  // measured <= 1.6e-8
      worst_chunked = std::max(worst_chunked, rel_error(r.grads, full.grads));
    }
    worst_vs_f32 = std::max(worst_vs_f32, rel_error(full.grads, full32.grads));
    worst_loss_vs_f32 = std::max(worst_loss_vs_f32, std::abs(full.loss - full32.loss) / full32.loss);
  }
  EXPECT_LE(worst_chunked, 5e-6);  // measured 1.2e-6
  EXPECT_LE(worst_vs_f32, 1e-2);   // measured 3.3e-3: K and V carry 8 bits of mantissa
  EXPECT_GT(worst_vs_f32, 1e-7);   // and they are rounded: the pages really are bf16
  EXPECT_LE(worst_loss_vs_f32, 5e-5);  // measured 9.5e-6
  std::cout << fmt::format("[ chunked  ] bf16 K/V pages: chunked vs full-sequence (both bf16) worst gradient rel. "
                           "error {:.2e}; vs f32 K/V: gradient {:.2e}, loss {:.2e}\n",
                           worst_chunked, worst_vs_f32, worst_loss_vs_f32);
  const auto dir = temp_dir("_plan");
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 41);
  const ModelConfig cfg = load_config(dir);
  const auto ws = make_cpu_backend()->workspace_bytes(workspace_shape(cfg, 256));
  ChunkPlan half{13, 16};
  half.kv_dtype = DType::BF16;
  const MemoryPlan f32 = plan_memory(cfg, {13, 16}, 131, "adamw", ws), bf16 = plan_memory(cfg, half, 131, "adamw", ws);
  EXPECT_EQ(2 * bf16.get(Tier::Host, Tag::KV), f32.get(Tier::Host, Tag::KV));
  EXPECT_EQ(bf16.get(Tier::Host, Tag::KVGrad), f32.get(Tier::Host, Tag::KVGrad));
  EXPECT_EQ(bf16.get(Tier::Host, Tag::Activations), f32.get(Tier::Host, Tag::Activations));
}

TEST(Chunked, SpansAreAlignedToTheEnd) {
  EXPECT_EQ(chunk_count(10, 4), 3);
  const ChunkSpan a = chunk_span(10, 4, 0), b = chunk_span(10, 4, 1), c = chunk_span(10, 4, 2);
  EXPECT_EQ(a.begin, 0);
  EXPECT_EQ(a.end, 2);  // the short chunk comes first
  EXPECT_EQ(b.begin, 2);
  EXPECT_EQ(b.end, 6);
  EXPECT_EQ(c.begin, 6);
  EXPECT_EQ(c.end, 10);  // the last chunk is full: N - C tokens precede it
  EXPECT_EQ(chunk_count(8, 8), 1);
  EXPECT_EQ(chunk_span(8, 8, 0).begin, 0);
}

}  // namespace
