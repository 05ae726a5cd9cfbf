// --precision bf16 against FlashAttention's rule: for the loss and every gradient of a small model,
// |oomb bf16 - float64| <= 2 x |PyTorch bf16 - float64|. The float64 reference and PyTorch's own
// bf16 results (autocast: float32 weights, bf16 matmuls; and pure: every tensor in bf16) were made
// by transformers on the GPU machine (tools/golden_hf.py) and are committed with the fixtures.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "hf/checkpoint.h"
#include "hf/safetensors.h"
#include "model_fixture.h"
#include "test_util.h"
#include "model/bf16_weights.h"
#include "kv/sparse_select.h"
#include "model/memory_plan.h"
#include "train/model.h"
#include "train/optimizer.h"

using namespace oomb;
using namespace oomb::testing;
namespace fs = std::filesystem;

namespace {

std::vector<double> as_f64(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<double> v(size_t(t->numel()));
  if (t->dtype == DType::F64) {
    f.read_raw(*t, v.data());
  } else {
    EXPECT_EQ(t->dtype, DType::F32) << name;
    std::vector<float> w(v.size());
    f.read_raw(*t, w.data());
    std::copy(w.begin(), w.end(), v.begin());
  }
  return v;
}

template <typename T>
double rel(const T* a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += b[i] * b[i];
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// The fixture's sequence (input_ids) and its next-token targets (the last: none).
struct FixtureTokens {
  std::vector<int32_t> ids, targets;
  int64_t n() const { return int64_t(ids.size()); }
};
FixtureTokens fixture_tokens(const SafetensorsFile& ref) {
  const TensorInfo* it = ref.find("input_ids");
  std::vector<int64_t> ids64(size_t(it->numel()));
  ref.read_raw(*it, ids64.data());
  FixtureTokens t;
  t.ids.assign(ids64.begin(), ids64.end());
  t.targets.assign(t.ids.begin() + 1, t.ids.end());
  t.targets.push_back(-1);
  return t;
}

}  // namespace

// The rule, applied where it measures something. Per gradient tensor: within twice the larger of
// PyTorch's two bf16 errors (pure bf16 and autocast; the smallest tensors here, 8 to 32 values,
// some with a near-zero true gradient such as a k bias, scatter widely for every implementation).
// The whole gradient (every parameter): within twice pure bf16's. The loss: one scalar per sequence
// is one draw of the rounding (the weights' rounding alone moves llama's loss by 3.4e-4, PyTorch's
// total is 1.1e-5 after cancellation), so it is held to the rule over the three models' sequences
// (root mean square).
namespace {

void within_twice_torchs_bf16_error(Backend& be) {
  double loss_sq = 0, torch_loss_sq = 0;
  int models = 0;
  for (const char* name : {"llama", "qwen2", "qwen3", "granite"}) {
    const fs::path dir = source_dir() / "tests/fixtures/hf" / name;
    if (std::string(name) == "granite" && !fs::exists(dir)) {  // (new to tools/golden_hf.py on 2026-11-30)
      std::cout << "[ bf16     ] granite: pending, tests/fixtures/hf/granite is not made yet (the next GPU "
                   "session's `python3 tools/golden_hf.py` makes it)\n";
      continue;
    }
    if (!fs::exists(dir / "reference_bf16.safetensors"))
      OOMB_MISSING_REFERENCE(fmt::format("{} is missing: made by `python3 tools/golden_hf.py` on a GPU machine",
                                         (dir / "reference_bf16.safetensors").string()));
    const SafetensorsFile ref = SafetensorsFile::open(dir / "reference.safetensors"),
                          torch16 = SafetensorsFile::open(dir / "reference_bf16.safetensors");
    const FixtureTokens tok = fixture_tokens(ref);
    const std::vector<int32_t>&ids = tok.ids, &targets = tok.targets;
    const int64_t N = tok.n();
    const double loss64 = as_f64(ref, "loss").at(0);
    const ModelConfig cfg = load_config(dir);
    for (int64_t C : {N, int64_t(7)}) {
      SCOPED_TRACE(fmt::format("{} C={}", name, C));
      ChunkPlan plan{C, 16};
      plan.precision = DType::BF16;
      Model m(cfg, be, plan);
      load_for_training(m, dir);
      const LossStats ls = m.forward_backward(ids.data(), targets.data(), N, 1.0f);
      const double ours_loss = std::abs(ls.loss_sum / double(ls.targets) - loss64) / loss64;
      const double pure_loss = std::abs(as_f64(torch16, "pure/loss").at(0) - loss64) / loss64;
      const double auto_loss = std::abs(as_f64(torch16, "autocast/loss").at(0) - loss64) / loss64;
      if (C == N) loss_sq += ours_loss * ours_loss, torch_loss_sq += pure_loss * pure_loss, ++models;
      const std::vector<float> grads = host_grads(m);
      double worst_ratio = 0, num = 0, den = 0, pnum = 0;
      int n = 0;
      for (const ParamSpec& s : m.grads().specs()) {
        const auto want = as_f64(ref, "grad/" + s.name);
        const float* g = grads.data() + s.offset;
        const double ours = rel(g, want);
        const auto a16 = as_f64(torch16, "autocast/grad/" + s.name), p16 = as_f64(torch16, "pure/grad/" + s.name);
        const double torch_err = std::max(rel(a16.data(), want), rel(p16.data(), want));
        EXPECT_LE(ours, 2 * torch_err) << s.name << ": PyTorch's bf16 error " << torch_err;
        worst_ratio = std::max(worst_ratio, ours / torch_err);
        for (size_t i = 0; i < want.size(); ++i)
          num += (g[i] - want[i]) * (g[i] - want[i]), pnum += (p16[i] - want[i]) * (p16[i] - want[i]),
              den += want[i] * want[i];
        ++n;
      }
      const double whole = std::sqrt(num / den), whole_pure = std::sqrt(pnum / den);
      EXPECT_LE(whole, 2 * whole_pure) << "the whole gradient";
      EXPECT_GT(whole, 1e-4) << "no bf16 rounding happened (fp32's error is ~1e-6, test_hf_golden)";
      std::cout << fmt::format("[ bf16     ] {} {} C={}: loss rel. error {:.1e} (PyTorch pure bf16 {:.1e}, autocast "
                               "{:.1e}); whole gradient {:.2e} (pure bf16 {:.2e}); {} tensors, worst ratio to "
                               "PyTorch's {:.2f}\n", be.name(), name, C, ours_loss, pure_loss, auto_loss, whole, whole_pure, n,
                               worst_ratio);
    }
  }
  // where the fixtures carry 16 more sequences per model (tools/golden_hf.py since 2026-11-24), the
  // loss is held to the rule over all of them too
  for (const char* name : {"llama", "qwen2", "qwen3", "granite"}) {
    const fs::path dir = source_dir() / "tests/fixtures/hf" / name;
    if (!fs::exists(dir / "reference_bf16.safetensors")) continue;  // (granite: pending, said above)
    const SafetensorsFile t16 = SafetensorsFile::open(dir / "reference_bf16.safetensors");
    const TensorInfo* seqs = t16.find("seqs/input_ids");
    if (!seqs) continue;
    std::vector<int64_t> all(size_t(seqs->numel()));
    t16.read_raw(*seqs, all.data());
    const auto l64 = as_f64(t16, "seqs/loss64"), lp = as_f64(t16, "seqs/pure_loss");
    const ModelConfig cfg = load_config(dir);
    ChunkPlan plan{seqs->shape[1], 16};
    plan.precision = DType::BF16;
    Model m(cfg, be, plan);
    load_for_training(m, dir);
    for (size_t k = 0; k < l64.size(); ++k) {
      const int64_t N = seqs->shape[1];
      std::vector<int32_t> ids(all.begin() + int64_t(k) * N, all.begin() + int64_t(k + 1) * N),
          tg(ids.begin() + 1, ids.end());
      tg.push_back(-1);
      const LossStats ls = m.evaluate(ids.data(), tg.data(), N);
      const double e = std::abs(ls.loss_sum / double(ls.targets) - l64[k]) / l64[k], ep = std::abs(lp[k] - l64[k]) / l64[k];
      loss_sq += e * e, torch_loss_sq += ep * ep, ++models;
    }
  }
  const double rms = std::sqrt(loss_sq / models), torch_rms = std::sqrt(torch_loss_sq / models);
  EXPECT_LE(rms, 2 * torch_rms) << "the loss over the three sequences";
  std::cout << fmt::format("[ bf16     ] {} loss over {} sequences: rms rel. error {:.2e} (PyTorch pure bf16 {:.2e})\n",
                           be.name(), models, rms, torch_rms);
}

}  // namespace

TEST(Bf16Budget, LossAndEveryGradientWithinTwiceTorchsBf16Error) {
  auto be = make_cpu_backend();
  within_twice_torchs_bf16_error(*be);
}

// The same rule for the GPU's bf16 step: bf16 GEMMs on cuBLASLt and attention on tensor cores (P
// and dS in bf16, as in PyTorch's own FlashAttention). Skips without a GPU. Not yet run on one.
TEST(Bf16Budget, CudaWithinTwiceTorchsBf16Error) {
  std::string why;
  auto be = make_cuda_backend(&why);
  if (!be) GTEST_SKIP() << why;
  within_twice_torchs_bf16_error(*be);
}

// --precision bf16 trains (the loss falls: the bf16 weight copy follows the optimizer's fp32
// masters), and the accountant's peaks equal the plan's (the weight matrices' bf16 copy: tag
// weights, 2 bytes a value; the matmul operands' bf16 scratch: tag activations; the CPU's fp32
// scratch for widening them: tag workspace).
TEST(Bf16Budget, TrainsAsPlanned) {
  const fs::path dir = source_dir() / "tests/fixtures/hf/qwen2";
  const ModelConfig cfg = load_config(dir);
  const SafetensorsFile ref = SafetensorsFile::open(dir / "reference.safetensors");
  const FixtureTokens tok = fixture_tokens(ref);
  const std::vector<int32_t>&ids = tok.ids, &tg = tok.targets;
  const int64_t N = tok.n();
  ChunkPlan plan{16, 8};
  plan.precision = DType::BF16;
  Accountant& acc = Accountant::global();
  acc.reset_peaks();
  auto be = make_cpu_backend();
  double first = 0, last = 0;
  {
    Model m(cfg, *be, plan);
    load_weights(dir, cfg, m.params());
    m.enable_grads();
    OptimConfig oc;
    oc.lr = 3e-3f, oc.total_steps = 6;
    Optimizer opt(oc, m.trainable(), m.grads(), *be);
    for (int k = 0; k < 6; ++k) {
      be->zero(m.grads().flat());
      const LossStats ls = m.forward_backward(ids.data(), tg.data(), N, 1.0f);
      (k == 0 ? first : last) = ls.loss_sum / double(ls.targets);
      opt.step(k, nullptr);
    }
    const MemoryPlan pm = plan_memory(cfg, plan, N, "adamw", be->workspace_bytes(workspace_shape(cfg, plan)));
    for (int i = 0; i < kNumTags; ++i) {
      if (Tag(i) != Tag::IO) {
        EXPECT_EQ(acc.get(Tier::Host, Tag(i)).peak, pm.get(Tier::Host, Tag(i))) << tag_name(Tag(i));
      }
    }
    // the fp32 masters and the bf16 copy of the matrices (each from a 256-byte boundary)
    int64_t values = 0, matrices = 0;
    for (const ParamSpec& s : param_layout(cfg))
      if (s.shape.size() == 2 && (s.name != "model.embed_tokens.weight" || cfg.tie_word_embeddings))
        values += s.numel(), ++matrices;
    EXPECT_EQ(pm.get(Tier::Host, Tag::Weights), param_count(cfg) * 4 + Bf16Weights::bytes(cfg));
    EXPECT_GE(Bf16Weights::bytes(cfg), 2 * values);
    EXPECT_LT(Bf16Weights::bytes(cfg), 2 * values + 256 * matrices);
  }
  EXPECT_LT(last, first);
  std::cout << fmt::format("[ bf16     ] 6 AdamW steps at --precision bf16: loss {:.4f} -> {:.4f}\n", first, last);
}

// The bf16 weight copy: every matrix a matmul reads, bf16, of its master's shape, at a 256-byte
// offset from the first, none overlapping, within the planned bytes; sync rounds each master value
// to nearest even (core/dtype's rule).
TEST(Bf16Budget, WeightCopyLayoutAndSync) {
  for (const char* name : {"llama", "qwen2"}) {
    SCOPED_TRACE(name);
    const ModelConfig cfg = load_config(source_dir() / "tests/fixtures/hf" / name);
    auto be = make_cpu_backend();
    Params masters(cfg, Tier::Host, Tag::IO);
    const auto r = randn(size_t(masters.flat().numel()), 5);
    std::copy(r.begin(), r.end(), masters.flat().f());
    Bf16Weights w16(cfg, Tier::Host);
    w16.sync(*be, masters);
    std::vector<std::pair<const Tensor*, Tensor>> pairs{
        {&w16.lm_head, cfg.tie_word_embeddings ? masters.embed : masters.lm_head}};
    for (size_t l = 0; l < masters.layers.size(); ++l) {
      const LayerParams &c = w16.layers[l], &m = masters.layers[l];
      for (auto [a, b] : {std::pair{&c.wq, &m.wq}, {&c.wk, &m.wk}, {&c.wv, &m.wv}, {&c.wo, &m.wo},
                          {&c.wgate, &m.wgate}, {&c.wup, &m.wup}, {&c.wdown, &m.wdown}})
        pairs.push_back({a, *b});
      EXPECT_TRUE(c.attn_norm.empty() && c.bq.empty()) << "norms and biases stay fp32";
    }
    uintptr_t first = UINTPTR_MAX;
    for (const auto& [c, m] : pairs) first = std::min(first, reinterpret_cast<uintptr_t>(c->data));
    std::vector<std::pair<uintptr_t, uintptr_t>> spans;
    for (const auto& [c, m] : pairs) {
      ASSERT_EQ(c->dtype, DType::BF16);
      ASSERT_EQ(c->shape_str(), m.shape_str());
      const uintptr_t at = reinterpret_cast<uintptr_t>(c->data) - first;
      EXPECT_EQ(at % 256, 0u) << c->shape_str();
      spans.push_back({at, at + c->bytes()});
      const uint16_t* h = c->as<uint16_t>();
      for (int64_t i = 0; i < m.numel(); ++i)
        if (h[i] != f32_to_bf16(m.f()[i])) {
          ADD_FAILURE() << "value " << i << " of a " << m.shape_str() << " matrix";
          break;
        }
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first) << "overlap";
    EXPECT_LE(int64_t(spans.back().second), Bf16Weights::bytes(cfg));
  }
}

// Under --precision bf16 every layer rounds K and V to bf16 before attention, so bf16 pages hold
// exactly the values f32 pages would (the CLI's --kv-dtype auto picks them): loss, every gradient
// and decoded logits give the same bits, chunked, offloaded, page-sparse and with documents, and
// every tier's K/V bytes halve.
TEST(Bf16Budget, Bf16PagesGiveF32PagesBitsInHalfTheBytes) {
  struct Case {
    const char* model;
    int64_t C, P;
    bool sim, offload, sparse, docs;
  };
  const Case cases[] = {{"qwen2", 0, 8, false, false, false, false}, {"qwen2", 7, 8, false, false, false, true},
                        {"llama", 5, 4, false, false, true, false},  {"qwen3", 7, 8, true, false, false, false},
                        {"qwen2", 7, 8, true, true, false, true},    {"llama", 6, 4, true, true, true, false}};
  Accountant& acc = Accountant::global();
  int checked = 0;
  for (const Case& c : cases) {
    const fs::path dir = source_dir() / "tests/fixtures/hf" / c.model;
    const ModelConfig cfg = load_config(dir);
    const SafetensorsFile ref = SafetensorsFile::open(dir / "reference.safetensors");
    const FixtureTokens tok = fixture_tokens(ref);
    const std::vector<int32_t>&ids = tok.ids, &tg = tok.targets;
    const int64_t N = tok.n();
    SCOPED_TRACE(fmt::format("{} N={} C={} P={}{}{}{}{}", c.model, N, c.C, c.P, c.sim ? " sim" : " cpu",
                             c.offload ? " --offload kv" : "", c.sparse ? " sparse" : "", c.docs ? " doc-mask" : ""));
    struct Result {
      double loss;
      std::vector<float> grads, logits;
      std::array<int64_t, kNumTiers> kv_peak;
    };
    auto run = [&](DType kv) {
      ChunkPlan plan{c.C > 0 ? c.C : N, c.P};
      plan.precision = DType::BF16;
      plan.kv_dtype = kv;
      plan.offload_kv = c.offload;
      if (c.docs) plan.doc_sep = ids[size_t(N / 3)];  // a token that occurs: documents to keep apart
      if (c.sparse) plan.sparse = sparse_options(1, 4, 1, false, "mean", plan.chunk, cfg.kv_heads);
      std::unique_ptr<Backend> be = c.sim ? make_sim_backend() : make_cpu_backend();
      Result r{};
      acc.reset_peaks();
      {
        Model m(cfg, *be, plan);
        load_for_training(m, dir);
        const LossStats ls = m.forward_backward(ids.data(), tg.data(), N, 1.0f);
        r.loss = ls.loss_sum;
        r.grads = host_grads(m);
        for (int t = 0; t < kNumTiers; ++t) r.kv_peak[size_t(t)] = acc.get(kTiers[t], Tag::KV).peak;
      }
      if (!c.sim && !c.sparse && !c.docs) {  // decoding: a generation's cache, a token at a time after the prompt
        Model m(cfg, *be, plan);
        load_weights(dir, cfg, m.params());
        m.begin_decode(N);
        std::vector<float> out(size_t(cfg.vocab));
        m.decode(ids.data(), N / 2, out.data());
        for (int64_t i = N / 2; i < N; ++i) {
          m.decode(&ids[size_t(i)], 1, out.data());
          r.logits.insert(r.logits.end(), out.begin(), out.end());
        }
      }
      return r;
    };
    const Result f32 = run(DType::F32), bf16 = run(DType::BF16);
    EXPECT_EQ(std::memcmp(&f32.loss, &bf16.loss, sizeof f32.loss), 0) << f32.loss << " vs " << bf16.loss;
    ASSERT_EQ(f32.grads.size(), bf16.grads.size());
    EXPECT_EQ(std::memcmp(f32.grads.data(), bf16.grads.data(), f32.grads.size() * 4), 0)
        << "gradient rel. error " << rel_error(bf16.grads, f32.grads);
    ASSERT_EQ(f32.logits.size(), bf16.logits.size());
    EXPECT_TRUE(f32.logits.empty() || std::memcmp(f32.logits.data(), bf16.logits.data(), f32.logits.size() * 4) == 0)
        << "decoded logits";
    int64_t total = 0;
    for (int t = 0; t < kNumTiers; ++t) {
      EXPECT_EQ(f32.kv_peak[size_t(t)], 2 * bf16.kv_peak[size_t(t)]) << tier_name(kTiers[t]);
      total += bf16.kv_peak[size_t(t)];
    }
    EXPECT_GT(total, 0);
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

namespace {
// Counts the K/V blocks attention reads, by dtype (every call, forward and backward)
class KVDtypeSpy final : public CpuBackend {
 public:
  int64_t bf16_blocks = 0, f32_blocks = 0;
  int64_t bwd_calls = 0, bwd_with_copies = 0;  // backward calls, and those given bf16 copies of q and dO

 protected:
  void count(std::span<const KVBlock> blocks) {
    for (const KVBlock& b : blocks) {
      (b.k.dtype == DType::BF16 ? bf16_blocks : f32_blocks) += 1;
      EXPECT_EQ(b.v.dtype, b.k.dtype);
    }
  }
  void do_attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                        Tensor& lse) override {
    count(blocks);
    CpuBackend::do_attention_fwd(q, blocks, a, o, lse);
  }
  void do_attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                        std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq) override {
    count(blocks);
    ++bwd_calls;
    if (!a.q16.empty()) {  // the copies hold q's and dO's values
      ++bwd_with_copies;
      for (auto [x, x16] : {std::pair{&q, &a.q16}, std::pair{&dout, &a.dout16}})
        for (int64_t i = 0; i < x->numel(); ++i)
          ASSERT_EQ(bf16_to_f32(x16->as<uint16_t>()[i]), x->f()[i]) << "element " << i << " of a copy";
    }
    CpuBackend::do_attention_bwd(q, o, lse, dout, blocks, a, dq);
  }
};
}  // namespace

// Under --precision bf16 attention reads the chunk's own keys from bf16 copies (in the matmul
// scratch, free while attention runs), as it reads bf16 pages: every block of every call is bf16,
// dense or page-sparse, one chunk or several (CUDA's tensor-core kernels load bf16 rows by
// cp.async, f32 rows by plain loads). The values are the same, so the bits are (the tests above:
// within twice PyTorch's bf16 error, and bf16 pages giving f32 pages' bits). fp32 matmuls with
// bf16 pages have no scratch: the own keys stay f32 there. Its backward gets bf16 copies of q and
// dO too (in the other matmul scratch), holding their values (CUDA's tensor-core dK/dV kernel
// streams them per query tile in place of the f32 rows).
TEST(Bf16Budget, AttentionReadsTheChunksOwnKeysAsBf16) {
  struct Case {
    const char* model;
    int64_t C, P;
    bool sparse;
  };
  for (const Case& c : {Case{"qwen2", 0, 8, false}, Case{"qwen2", 7, 8, false}, Case{"llama", 5, 4, true},
                        Case{"qwen3", 7, 8, false}}) {
    const fs::path dir = source_dir() / "tests/fixtures/hf" / c.model;
    const ModelConfig cfg = load_config(dir);
    const FixtureTokens tok = fixture_tokens(SafetensorsFile::open(dir / "reference.safetensors"));
    const int64_t N = tok.n();
    SCOPED_TRACE(fmt::format("{} N={} C={} P={}{}", c.model, N, c.C, c.P, c.sparse ? " sparse" : ""));
    for (DType precision : {DType::BF16, DType::F32}) {
      ChunkPlan plan{c.C > 0 ? c.C : N, c.P};
      plan.precision = precision;
      plan.kv_dtype = DType::BF16;
      if (c.sparse) plan.sparse = sparse_options(1, 4, 1, false, "mean", plan.chunk, cfg.kv_heads);
      KVDtypeSpy be;
      Model m(cfg, be, plan);
      load_for_training(m, dir);
      m.forward_backward(tok.ids.data(), tok.targets.data(), N, 1.0f);
      EXPECT_GT(be.bwd_calls, 0);
      if (precision == DType::BF16) {
        EXPECT_GT(be.bf16_blocks, 0);
        EXPECT_EQ(be.f32_blocks, 0) << "blocks of f32 keys under --precision bf16";
        EXPECT_EQ(be.bwd_with_copies, be.bwd_calls) << "backward calls without bf16 copies of q and dO";
      } else {
        EXPECT_EQ(be.bwd_with_copies, 0) << "bf16 copies of q and dO under fp32 matmuls";
        EXPECT_GT(be.f32_blocks, 0) << "fp32 matmuls: the own keys stay f32";
        if (c.C > 0) {
          EXPECT_GT(be.bf16_blocks, 0) << "the pages are bf16";
        }
      }
    }
  }
}

// --precision bf16: the matmuls' operands that only matmuls read come out of their ops in bf16
// (rmsnorm_fwd's a and b, glu_fwd's act, glu_bwd's dgate and dup, each rounded as cast
// rounds), so no cast of an f32 (T, I) tensor runs in a step (before: five a layer and chunk, the
// act of each forward pass and the backward, dgate and dup) and the two layer norms' outputs are
// bf16 (Qwen3's per-head q/k norms feed RoPE: f32). With fp32 matmuls every output stays f32.
class OperandSpy final : public CpuBackend {
 public:
  int64_t wide_casts = 0, casts = 0, norms16 = 0, norms = 0, head_norms = 0, swiglu16 = 0, swiglu = 0, glu_bwd16 = 0;
  int64_t I = 0, T = 0, D = 0;

 protected:
  void do_cast(const Tensor& src, Tensor& dst) override {
    ++casts;
    wide_casts += src.dtype == DType::F32 && src.ndim == 2 && src.dim(1) == I && src.dim(0) <= T;  // (not a weight)
    CpuBackend::do_cast(src, dst);
  }
  void do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, float off) override {
    ++norms;
    norms16 += y.dtype == DType::BF16;
    head_norms += x.dim(1) == D;  // Qwen3's q/k norms, over each head's rows
    CpuBackend::do_rmsnorm_fwd(x, w, eps, y, rstd, off);
  }
  void do_glu_fwd(const Tensor& gate, const Tensor& up, Tensor& out, Act act) override {
    ++swiglu;
    swiglu16 += out.dtype == DType::BF16;
    CpuBackend::do_glu_fwd(gate, up, out, act);
  }
  void do_glu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup,
                  Act act) override {
    glu_bwd16 += dgate.dtype == DType::BF16;
    CpuBackend::do_glu_bwd(gate, up, dout, dgate, dup, act);
  }
};

TEST(Bf16Budget, NormsAndSwiGluWriteTheMatmulsOperands) {
  for (const char* model : {"qwen2", "qwen3"}) {
    const fs::path dir = source_dir() / "tests/fixtures/hf" / model;
    const ModelConfig cfg = load_config(dir);
    const FixtureTokens tok = fixture_tokens(SafetensorsFile::open(dir / "reference.safetensors"));
    const int64_t N = tok.n(), L = cfg.layers;
    for (DType precision : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(fmt::format("{} {}", model, dtype_name(precision)));
      ChunkPlan plan{7, 8};
      plan.precision = precision;
      OperandSpy be;
      be.I = cfg.intermediate, be.T = plan.chunk, be.D = cfg.head_dim;
      ASSERT_NE(be.I, cfg.hidden);
      ASSERT_NE(be.D, cfg.hidden);
      ASSERT_LT(plan.chunk, cfg.hidden);
      Model m(cfg, be, plan);
      load_for_training(m, dir);
      m.forward_backward(tok.ids.data(), tok.targets.data(), N, 1.0f);
      const int64_t chunks = (N + 6) / 7;
      EXPECT_EQ(be.wide_casts, 0) << "casts of an f32 (T, I) tensor";
      EXPECT_GT(be.swiglu, 0);
      if (precision == DType::BF16) {
        EXPECT_EQ(be.swiglu16, be.swiglu) << "glu_fwd writing f32";
        EXPECT_EQ(be.glu_bwd16, chunks * L) << "glu_bwd writing f32";
        // each forward pass: two a layer, and the final norm (the lm_head's input)
        EXPECT_EQ(be.norms - be.norms16, be.head_norms) << "norms other than Qwen3's q/k norms writing f32";
        EXPECT_GT(be.norms16, 2 * be.swiglu) << "the final norm writing f32";
        EXPECT_EQ(be.head_norms > 0, cfg.qk_norm);
        EXPECT_GT(be.casts, 0) << "the rest still cast (o, the output gradients, q, dO, own K/V)";
      } else {
        EXPECT_EQ(be.norms16 + be.swiglu16 + be.glu_bwd16, 0) << "bf16 outputs with fp32 matmuls";
      }
      std::cout << fmt::format("[ bf16     ] {} {}: {} casts in a step of {} chunks x {} layers, none of (T, I)\n",
                               model, dtype_name(precision), be.casts, chunks, L);
    }
  }
}

// What holds only bf16 values is held in bf16 under --precision bf16: the norms' outputs a and b
// (C, d), swiglu's act and its gradients dgate, dup (C, I), which only matmuls read, and each
// layer's attention output (C, H, D) kept from the recompute sweep take half their fp32 bytes, and
// the final norm writes into the matmul scratch (no (C, d) of its own). Against that, bf16 adds the
// scratch for the rest: x16 (C, max(d, H D, I)) and dy16 (C, max(d, 2 H D, I)), bf16. Measured
// peaks of both runs (the chunk order).
TEST(Bf16Budget, ActivationsHoldBf16ValuesInBf16) {
  auto need = [](DType t, std::initializer_list<int64_t> s) { return int64_t(Arena::need(t, s)); };
  for (const char* model : {"qwen2", "qwen3"}) {
    const fs::path dir = source_dir() / "tests/fixtures/hf" / model;
    const ModelConfig cfg = load_config(dir);
    const FixtureTokens tok = fixture_tokens(SafetensorsFile::open(dir / "reference.safetensors"));
    const int64_t C = 16, d = cfg.hidden, I = cfg.intermediate, HD = cfg.heads * cfg.head_dim, L = cfg.layers;
    int64_t peak[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      ChunkPlan plan{C, 8};
      plan.precision = i == 0 ? DType::F32 : DType::BF16;
      Accountant& acc = Accountant::global();
      acc.reset_peaks();
      auto be = make_cpu_backend();
      Model m(cfg, *be, plan);
      load_for_training(m, dir);
      m.forward_backward(tok.ids.data(), tok.targets.data(), tok.n(), 1.0f);
      peak[i] = acc.get(Tier::Host, Tag::Activations).peak;
    }
    const int64_t halved = 2 * (need(DType::F32, {C, d}) - need(DType::BF16, {C, d})) +
                           3 * (need(DType::F32, {C, I}) - need(DType::BF16, {C, I})) + need(DType::F32, {C, d}) +
                           L * (need(DType::F32, {C, HD}) - need(DType::BF16, {C, HD}));
    const int64_t scratch = need(DType::BF16, {C, std::max({d, HD, I})}) +
                            need(DType::BF16, {C, std::max({d, 2 * HD, I})});
    EXPECT_EQ(peak[0] - peak[1], halved - scratch) << model << ": fp32 " << peak[0] << " B, bf16 " << peak[1] << " B";
    EXPECT_LT(peak[1], peak[0]) << model;
    std::cout << fmt::format("[ bf16     ] {} activations at C = {}: fp32 {} B, bf16 {} B (halved: -{} B, "
                             "bf16 scratch: +{} B)\n", model, C, peak[0], peak[1], halved, scratch);
  }
}
