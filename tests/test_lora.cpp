// LoRA against PEFT's own code: tests/fixtures/hf/{llama,qwen2}/lora/ hold adapters made and saved
// by PEFT (tools/golden_hf.py, on the GPU machine) with their loss, logits and every adapter
// gradient computed by PEFT in float64. Then PEFT's file format (names, shapes, config) against
// the files PEFT wrote, the frozen base, the merged model, the memory saving and bad input.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "data/repeat_task.h"
#include "hf/checkpoint.h"
#include "hf/adapter_config.h"
#include "hf/peft.h"
#include "hf/safetensors.h"
#include "model/bf16_weights.h"
#include "model/params.h"
#include "model/init.h"
#include "model/memory_plan.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "train/trainer.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;
namespace fs = std::filesystem;

namespace {

fs::path fixture(const std::string& model) { return source_dir() / "tests/fixtures/hf" / model; }

std::vector<double> f64(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<double> v(size_t(t->numel()));
  if (t->dtype == DType::F32) {  // (PyTorch's bf16 gradients are stored as f32)
    std::vector<float> w(v.size());
    f.read_raw(*t, w.data());
    std::copy(w.begin(), w.end(), v.begin());
  } else {
    f.read_raw(*t, v.data());
  }
  return v;
}

double rel(const float* a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// The model of a fixture with its PEFT adapter loaded, on the CPU.
struct Loaded {
  ModelConfig cfg;
  LoraConfig lora;
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<Model> m;
  Loaded(const std::string& name, int64_t C, int64_t N, DType precision = DType::F32) {
    const fs::path dir = fixture(name);
    cfg = load_config(dir);
    lora = load_adapter_config(dir / "lora");
    ChunkPlan plan{std::min(C, N), 16};
    plan.lora = lora;
    plan.precision = precision;
    m = std::make_unique<Model>(cfg, *be, plan);
    load_weights(dir, cfg, m->params());
    load_adapter(dir / "lora", m->params(), m->trainable());
  }
};

std::vector<int32_t> fixture_ids(const SafetensorsFile& ref) {
  const TensorInfo* it = ref.find("input_ids");
  std::vector<int64_t> ids64(size_t(it->numel()));
  ref.read_raw(*it, ids64.data());
  return {ids64.begin(), ids64.end()};
}

// Phi-3's adapter (qkv_proj, gate_up_proj), Granite's, Gemma 3's and GLM's (gate_up_proj) are new to tools/golden_hf.py
// (2026-11-30 to 12-02): until
// a GPU session has made them, their tests are pending, not a broken checkout (drop this once committed)
class LoraPeft : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string name = GetParam();
    if ((name == "phi3" || name == "granite" || name == "gemma3" || name == "glm") &&
        !fs::exists(fixture(name) / "lora/reference.safetensors"))
      GTEST_SKIP() << "tests/fixtures/hf/" << name << "/lora is not made yet: the next GPU session's `python3 "
                      "tools/golden_hf.py` makes it (scripts/gpu_session.sh golden_hf)";
  }
};

}  // namespace

// Loss, logits and every adapter gradient against PEFT's float64 (the base frozen: PEFT computes no
// gradient for it and oomb allocates none), full-sequence and chunked.
TEST_P(LoraPeft, LossLogitsAndEveryAdapterGradient) {
  const fs::path dir = fixture(GetParam());
  if (!fs::exists(dir / "lora/reference.safetensors"))
    OOMB_MISSING_REFERENCE(fmt::format("{} is missing: made by `python3 tools/golden_hf.py` where PEFT exists",
                                       (dir / "lora").string()));
  const SafetensorsFile ref = SafetensorsFile::open(dir / "lora/reference.safetensors");
  std::vector<int32_t> ids = fixture_ids(SafetensorsFile::open(dir / "reference.safetensors"));
  const int64_t N = int64_t(ids.size());
  std::vector<int32_t> targets(ids.begin() + 1, ids.end());
  targets.push_back(-1);
  const double loss = f64(ref, "loss").at(0);
  for (int64_t C : {N, int64_t(7)}) {
    SCOPED_TRACE(fmt::format("{} C={}", GetParam(), C));
    Loaded L(GetParam(), C, N);
    L.m->enable_grads();
    EXPECT_EQ(L.m->grads().flat().numel(), lora_param_count(L.cfg, L.lora)) << "gradients only for the adapters";
    const LossStats ls = L.m->forward_backward(ids.data(), targets.data(), N, 1.0f);
    const double got = ls.loss_sum / double(ls.targets);
    EXPECT_NEAR(got, loss, 1e-7 * loss);  // measured <= 1.7e-8
    double worst = 0;
    int n = 0;
    for (const ParamSpec& s : L.m->grads().specs()) {
      const auto want = f64(ref, "grad/" + s.name);
      ASSERT_EQ(int64_t(want.size()), s.numel()) << s.name;
      const double e = rel(L.m->grads().view(s).f(), want);
      EXPECT_LE(e, 1e-5) << s.name;  // measured <= 1.6e-6 (fp32 against float64)
      worst = std::max(worst, e), ++n;
    }
    EXPECT_EQ(n, int(ref.tensors().size()) - 2) << "every adapter tensor PEFT differentiated";
    std::vector<float> lg(size_t(N * L.cfg.vocab));
    L.m->logits(ids.data(), N, lg.data());
    const double le = rel(lg.data(), f64(ref, "logits"));
    EXPECT_LE(le, 2e-6);  // measured <= 7.0e-7
    std::cout << fmt::format("[ lora     ] {} C={}: loss {:.6f} (PEFT {:.6f}, rel. error {:.1e}), {} adapter gradients, "
                             "worst rel. error {:.2e}, logits {:.2e}\n", GetParam(), C, got, loss,
                             std::abs(got - loss) / loss, n, worst, le);
  }
}

// --precision bf16: the adapters' GEMMs read bf16 operands as the base's do (PEFT under autocast),
// so the adapter gradients carry bf16's error. The bound is FlashAttention's rule, taken from the
// same model's weight gradients: an adapter gradient is made of the same bf16 operands as a base
// weight gradient (dB = s dy^T u, dA = s (dy B)^T x against dW = dy^T x, one rounding more in u or
// du), so the whole adapter gradient stays within twice PyTorch's whole bf16 error on the base's
// gradients (the worse of pure bf16 and autocast; tests/fixtures/hf/*/reference_bf16), and each
// tensor within four times (tensors of 64 to 512 values scatter more than the whole). Control:
// bf16's error is over ten times fp32's (measured <= 1.6e-6 above): the rounding happened.
TEST_P(LoraPeft, Bf16GradientsWithinTwiceTorchsBf16Error) {
  const fs::path dir = fixture(GetParam());
  if (!fs::exists(dir / "lora/reference.safetensors") || !fs::exists(dir / "reference_bf16.safetensors"))
    OOMB_MISSING_REFERENCE(fmt::format("{}/lora or reference_bf16 is missing: made by `python3 tools/golden_hf.py`",
                                       dir.string()));
  const SafetensorsFile ref = SafetensorsFile::open(dir / "lora/reference.safetensors"),
                        base = SafetensorsFile::open(dir / "reference.safetensors"),
                        t16 = SafetensorsFile::open(dir / "reference_bf16.safetensors");
  // PyTorch's bf16 error on the base model's whole gradient (every parameter)
  double torch_err = 0;
  for (const char* mode : {"pure", "autocast"}) {
    double num = 0, den = 0;
    for (const TensorInfo& t : base.tensors()) {  // every gradient, by the file's names (Phi-3's fused ones)
      if (!t.name.starts_with("grad/")) continue;
      const auto want = f64(base, t.name), got = f64(t16, std::string(mode) + "/" + t.name);
      for (size_t i = 0; i < want.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    }
    torch_err = std::max(torch_err, std::sqrt(num / den));
  }
  std::vector<int32_t> ids = fixture_ids(base);
  const int64_t N = int64_t(ids.size());
  std::vector<int32_t> targets(ids.begin() + 1, ids.end());
  targets.push_back(-1);
  const double loss = f64(ref, "loss").at(0);
  for (int64_t C : {N, int64_t(7)}) {
    SCOPED_TRACE(fmt::format("{} C={}", GetParam(), C));
    Loaded L(GetParam(), C, N, DType::BF16);
    L.m->enable_grads();
    const LossStats ls = L.m->forward_backward(ids.data(), targets.data(), N, 1.0f);
    const double loss_err = std::abs(ls.loss_sum / double(ls.targets) - loss) / loss;
    double num = 0, den = 0, worst = 0;
    for (const ParamSpec& s : L.m->grads().specs()) {
      const auto want = f64(ref, "grad/" + s.name);
      const float* g = L.m->grads().view(s).f();
      const double e = rel(g, want);
      EXPECT_LE(e, 4 * torch_err) << s.name;
      worst = std::max(worst, e);
      for (size_t i = 0; i < want.size(); ++i) num += (g[i] - want[i]) * (g[i] - want[i]), den += want[i] * want[i];
    }
    const double whole = std::sqrt(num / den);
    EXPECT_LE(whole, 2 * torch_err) << "the whole adapter gradient";
    EXPECT_GT(whole, 10 * 1.6e-6) << "no bf16 rounding happened";
    std::cout << fmt::format("[ lora bf16] {} C={}: loss rel. error {:.1e}; whole adapter gradient {:.2e}, worst "
                             "tensor {:.2e} (PyTorch bf16 on the base's whole gradient {:.2e})\n", GetParam(), C,
                             loss_err, whole, worst, torch_err);
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, LoraPeft, ::testing::Values("llama", "qwen2", "phi3", "granite", "gemma3", "glm"),
                         [](const auto& info) { return std::string(info.param); });

// An adapter oomb saves is PEFT's file: the same tensor names, shapes and dtype as the file PEFT
// wrote, the same values, and the same config fields PEFT reads.
TEST_P(LoraPeft, SavedAdapterIsPeftsFormat) {
  const fs::path dir = fixture(GetParam());
  if (!fs::exists(dir / "lora/adapter_config.json"))
    OOMB_MISSING_REFERENCE(fmt::format("{} is missing", (dir / "lora").string()));
  Loaded L(GetParam(), 8, 8);
  const fs::path out = temp_dir("_peft") / "adapter";
  save_adapter(out, L.cfg, L.lora, L.m->trainable(), dir.string());
  const SafetensorsFile theirs = SafetensorsFile::open(dir / "lora/adapter_model.safetensors");
  const SafetensorsFile ours = SafetensorsFile::open(out / "adapter_model.safetensors");
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (const TensorInfo& t : theirs.tensors()) {
    const TensorInfo* o = ours.find(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    EXPECT_EQ(o->shape, t.shape) << t.name;
    EXPECT_EQ(o->dtype, t.dtype) << t.name;
    std::vector<char> a(t.end - t.begin), b(o->end - o->begin);
    theirs.read_raw(t, a.data());
    ours.read_raw(*o, b.data());
    EXPECT_EQ(a, b) << t.name;
  }
  nlohmann::json pj, oj;
  std::ifstream(dir / "lora/adapter_config.json") >> pj;
  std::ifstream(out / "adapter_config.json") >> oj;
  for (const char* k : {"peft_type", "task_type", "r", "lora_alpha", "use_rslora", "lora_dropout", "bias",
                        "fan_in_fan_out", "modules_to_save"})
    EXPECT_EQ(oj.at(k), pj.at(k)) << k;
  auto sorted = [](nlohmann::json j) {
    auto v = j.get<std::vector<std::string>>();
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(oj.at("target_modules")), sorted(pj.at("target_modules")));
  // and it loads back to the same numbers
  Params back(L.cfg, lora_layout(L.cfg, load_adapter_config(out)), Tier::Host, Tag::IO);
  load_adapter(out, L.m->params(), back);
  EXPECT_EQ(std::memcmp(back.flat().data, L.m->trainable().flat().data, back.flat().bytes()), 0);
}

// The merged model (W + s B A) computes what base + adapter compute.
TEST_P(LoraPeft, MergedModelEqualsBasePlusAdapter) {
  const fs::path dir = fixture(GetParam());
  if (!fs::exists(dir / "lora/adapter_config.json"))
    OOMB_MISSING_REFERENCE(fmt::format("{} is missing", (dir / "lora").string()));
  std::vector<int32_t> ids = fixture_ids(SafetensorsFile::open(dir / "reference.safetensors"));
  const int64_t N = int64_t(ids.size());
  Loaded L(GetParam(), N, N);
  std::vector<float> want(size_t(N * L.cfg.vocab)), got(want.size());
  L.m->logits(ids.data(), N, want.data());
  Params merged(L.cfg, Tier::Host, Tag::IO);
  load_weights(dir, L.cfg, merged);
  merge_adapter(merged, L.m->trainable(), L.lora);
  const fs::path out = temp_dir("_merged") / "m";
  save_model(out, L.cfg, merged, DType::F32, dir);
  auto be = make_cpu_backend();
  Model plain(L.cfg, *be, {N, 16});
  load_weights(out, L.cfg, plain.params());
  plain.logits(ids.data(), N, got.data());
  const double e = rel_error(got, want);
  EXPECT_LE(e, 3e-6);  // measured <= 6.7e-7: the same function, the adapter's product summed into W once
  EXPECT_GT(rel_error(want, [&] {  // and the adapter does change the model (B is not zero here)
              std::vector<float> base(want.size());
              Model b(L.cfg, *be, {N, 16});
              load_weights(dir, L.cfg, b.params());
              b.logits(ids.data(), N, base.data());
              return base;
            }()), 1e-3);
  std::cout << fmt::format("[ lora     ] {}: merged model's logits against base + adapter: rel. error {:.2e}\n",
                           GetParam(), e);
}

// Training with fresh adapters (B = 0) starts from the base model's loss bit for bit, never moves a
// base weight, and holds gradients and AdamW moments for the adapters alone: the accountant's
// peaks equal the plan's, which are the formulas written here.
TEST(Lora, TrainsAdaptersOnlyFromTheBaseAndAsPlanned) {
  for (const DType precision : {DType::F32, DType::BF16}) {
  SCOPED_TRACE(dtype_name(precision));
  const fs::path dir = temp_dir("_lora_train");
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("qwen2", 2), 7);
  LoraConfig lc;
  lc.rank = 3;
  lc.alpha = 6;
  parse_lora_targets("q,k,v,o,gate,up,down", lc);
  const int64_t N = 96;
  ChunkPlan plan{32, 16};
  plan.lora = lc;
  plan.precision = precision;  // bf16: the base's and the adapters' bf16 copies beside their masters
  auto be = make_cpu_backend();
  double base_loss = 0;
  RepeatTask task(3, cfg.vocab);
  std::vector<int32_t> ids(N), tg(N);
  task.window(0, N, ids.data(), tg.data());
  {
    ChunkPlan plain_plan{32, 16};
    plain_plan.precision = precision;
    Model plain(cfg, *be, plain_plan);
    load_weights(dir, cfg, plain.params());
    const LossStats ls = plain.evaluate(ids.data(), tg.data(), N);
    base_loss = ls.loss_sum / double(ls.targets);
  }
  Accountant& acc = Accountant::global();
  acc.reset_peaks();
  {
    Model m(cfg, *be, plan);
    load_weights(dir, cfg, m.params());
    init_lora(m.trainable(), m.params(), 11);
    const LossStats first = m.evaluate(ids.data(), tg.data(), N);
    EXPECT_EQ(first.loss_sum / double(first.targets), base_loss) << "B = 0: the adapters add exactly nothing";
    TrainOptions o{N, 4, 1, 100, {}, ""};
    o.optim.lr = 1e-2f;
    std::ostringstream log;
    const StepStats st = train(m, task, o, log);
    EXPECT_LT(st.loss, base_loss) << "the adapters learn";
    Params loaded(cfg, m.host_layout(), Tier::Host, Tag::IO);  // (bf16: the frozen base as loaded)
    load_weights(dir, cfg, loaded);
    EXPECT_EQ(m.params().flat().bytes(), loaded.flat().bytes());
    EXPECT_EQ(std::memcmp(m.params().flat().data, loaded.flat().data, loaded.flat().bytes()), 0) << "a base weight moved";
    const int64_t Pt = lora_param_count(cfg, lc);
    int64_t want_pt = 0;  // the formula: r (in + out) per adapted linear and layer
    const int64_t d = cfg.hidden, qd = cfg.heads * cfg.head_dim, kd = cfg.kv_heads * cfg.head_dim,
                  I = cfg.intermediate;
    for (auto [in, out] : {std::pair{d, qd}, {d, kd}, {d, kd}, {qd, d}, {d, I}, {d, I}, {I, d}})
      want_pt += cfg.layers * lc.rank * (in + out);
    EXPECT_EQ(Pt, want_pt);
    const MemoryPlan pm = plan_memory(cfg, plan, N, "adamw", be->workspace_bytes(workspace_shape(cfg, plan)));
    EXPECT_EQ(acc.get(Tier::Host, Tag::Grads).peak, Pt * 4);
    EXPECT_EQ(acc.get(Tier::Host, Tag::Optimizer).peak, 2 * Pt * 4);
    // bf16: the frozen base once (bf16 matrices, fp32 rest) and the adapters' bf16 copy
    const bool bf16 = precision == DType::BF16;
    const int64_t base = bf16 ? frozen_bf16_bytes(cfg) : param_count(cfg) * 4,
                  copies = bf16 ? Bf16Weights::adapter_bytes(cfg, lc) : 0;
    EXPECT_EQ(acc.get(Tier::Host, Tag::Weights).peak, base + Pt * 4 + copies);
    if (precision == DType::BF16) {
      EXPECT_GE(Bf16Weights::adapter_bytes(cfg, lc), Pt * 2);
    }
    for (int i = 0; i < kNumTags; ++i) {
      if (Tag(i) != Tag::IO) {
        EXPECT_EQ(acc.get(Tier::Host, Tag(i)).peak, pm.get(Tier::Host, Tag(i))) << tag_name(Tag(i)) << ": plan";
      }
    }
    std::cout << fmt::format("[ lora     ] {}: {} trainable of {} parameters; grads {} B, optimizer {} B (full "
                             "fine-tuning: {} B, {} B), the base {} B, bf16 copies {} B; loss {:.4f} -> {:.4f}\n",
                             dtype_name(precision), Pt, param_count(cfg), Pt * 4, 2 * Pt * 4, param_count(cfg) * 4,
                             2 * param_count(cfg) * 4, base, copies, base_loss, st.loss);
  }
  }
}

// --train-embeddings-norms: the embedding's and norms' gradients are full fine-tuning's of the same
// function (the model with the adapter merged), which the float64 oracle checks elsewhere.
// --precision bf16: the adapters' GEMMs read the adapters' bf16 copy. Moving every adapter master by
// one unit in its last place (where that keeps its bf16 value) leaves the loss and every gradient
// bit for bit as they were; in fp32 (the control) the same move changes them.
TEST(Lora, Bf16AdaptersComputeWithTheirBf16Copy) {
  if (!fs::exists(fixture("qwen2") / "lora/adapter_config.json")) OOMB_MISSING_REFERENCE("tests/fixtures/hf/qwen2/lora is missing");
  std::vector<int32_t> ids = fixture_ids(SafetensorsFile::open(fixture("qwen2") / "reference.safetensors"));
  const int64_t N = int64_t(ids.size());
  std::vector<int32_t> tg(ids.begin() + 1, ids.end());
  tg.push_back(-1);
  for (const DType precision : {DType::BF16, DType::F32}) {
    double loss[2];
    std::vector<float> grads[2];
    int64_t moved = 0;
    for (int move = 0; move < 2; ++move) {
      Loaded L("qwen2", 13, N, precision);
      if (move) {
        Tensor& t = L.m->trainable().flat();
        for (int64_t i = 0; i < t.numel(); ++i) {
          uint32_t bits;
          std::memcpy(&bits, t.f() + i, 4);
          float up;
          ++bits;
          std::memcpy(&up, &bits, 4);
          if (f32_to_bf16(up) == f32_to_bf16(t.f()[i])) t.f()[i] = up, ++moved;
        }
      }
      L.m->enable_grads();
      const LossStats ls = L.m->forward_backward(ids.data(), tg.data(), N, 1.0f);
      loss[move] = ls.loss_sum;
      const Tensor& g = L.m->grads().flat();
      grads[move].assign(g.f(), g.f() + g.numel());
    }
    const bool same_loss = std::memcmp(&loss[0], &loss[1], sizeof(double)) == 0,
               same_grads = std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * 4) == 0;
    EXPECT_GT(moved, int64_t(grads[0].size()) / 2);
    if (precision == DType::BF16) {
      EXPECT_TRUE(same_loss && same_grads) << "the adapters' GEMMs read the fp32 masters";
    } else {
      EXPECT_FALSE(same_loss && same_grads) << "control: fp32 adapters see the move";
    }
    std::cout << fmt::format("[ lora bf16] {} of {} adapter values moved by one ulp, {}: loss {}, gradients {} (rel. "
                             "{:.1e})\n", moved, grads[0].size(), dtype_name(precision),
                             same_loss ? "same" : "other", same_grads ? "bit for bit the same" : "differ",
                             rel_error(grads[0], grads[1]));
  }
}

// LoRA with --precision bf16 holds the frozen base once, as the layers compute with it: bf16
// matrices and the fp32 rest where parameters live (the device here), no fp32 masters anywhere.
// 3 AdamW steps on the simulated device give the CPU's bits (each step's loss and adapter
// gradients, the adapters and moments after); the plan equals every (tier, tag) peak; nothing is
// pinned. With B = 0 the loss is, bit for bit, that of the model without LoRA under bf16 (fp32
// masters, their bf16 copy cast each pass): loading rounds the base as that cast does. Moving one
// base value by one bf16 ulp changes it (the control).
// Untied, and tied (the lm_head's bf16 copy of the fp32 embedding beside the base).
static void expect_frozen_bf16_base(bool tied) {
  const fs::path dir = temp_dir(tied ? "_lora_frozen_tied" : "_lora_frozen");
  nlohmann::json j = tiny_config_json("qwen2", 2);
  j["tie_word_embeddings"] = tied;
  const ModelConfig cfg = write_tiny_model(dir, j, 17);
  LoraConfig lc;
  lc.rank = 4;
  lc.alpha = 8;
  parse_lora_targets("all", lc);
  const int64_t N = 37;
  ChunkPlan plan{13, 8};
  plan.lora = lc;
  plan.precision = DType::BF16;
  Params base(cfg, Tier::Host, Tag::IO), adapters(cfg, lora_layout(cfg, lc), Tier::Host, Tag::IO);
  load_weights(dir, cfg, base);
  init_lora(adapters, base, 18);
  const auto noise = randn(size_t(adapters.flat().numel()), 19);
  for (const ParamSpec& sp : adapters.specs())  // B nonzero: A has a gradient from the first step
    if (sp.name.ends_with(".lora_B.weight"))
      for (int64_t i = sp.offset; i < sp.offset + sp.numel(); ++i) adapters.flat().f()[i] = 0.05f * noise[size_t(i)];
  struct Run {
    std::vector<double> losses;
    std::vector<float> grads, trained, moments;
  };
  Accountant& acc = Accountant::global();
  MemoryPlan pm;
  RepeatTask task(3, cfg.vocab);
  std::vector<int32_t> ids(N), tg(N);
  task.window(0, N, ids.data(), tg.data());
  auto run = [&](Backend& be) {
    Run r;
    Model m(cfg, be, plan);
    EXPECT_TRUE(m.params().mixed());
    load_for_training(m, dir);
    m.upload_trainable(adapters);
    OptimConfig oc;
    oc.lr = 1e-2f, oc.total_steps = 3, oc.grad_clip = 0.5f;
    Optimizer opt(oc, m.trainable(), m.grads(), be);
    for (int k = 0; k < 3; ++k) {
      m.zero_grads();
      r.losses.push_back(m.forward_backward(ids.data(), tg.data(), N, 1.0f).loss_sum);
      const std::vector<float> g = host_grads(m);
      r.grads.insert(r.grads.end(), g.begin(), g.end());
      opt.step(k, nullptr);
    }
    r.trained = on_host(be, m.trainable());
    r.moments = on_host(be, *opt.exp_avg_sq());
    pm = plan_memory(cfg, plan, N, "adamw", be.workspace_bytes(workspace_shape(cfg, plan)), be.tier(),
                     be.pinned_workspace_bytes());
    return r;
  };
  Run on_cpu;
  {
    auto cpu = make_cpu_backend();  // (gone before the peaks are counted: its workspace is the host's)
    on_cpu = run(*cpu);
  }
  acc.reset_peaks();
  auto sim = make_sim_backend();
  const Run on_sim = run(*sim);
  EXPECT_EQ(std::memcmp(on_cpu.losses.data(), on_sim.losses.data(), on_cpu.losses.size() * 8), 0);
  EXPECT_EQ(on_cpu.grads, on_sim.grads) << "rel. error " << rel_error(on_cpu.grads, on_sim.grads);
  EXPECT_EQ(on_cpu.trained, on_sim.trained);
  EXPECT_EQ(on_cpu.moments, on_sim.moments);
  EXPECT_LT(on_sim.losses.back(), on_sim.losses.front()) << "the adapters learn";
  for (Tier tier : kTiers)
    for (int i = 0; i < kNumTags; ++i) {
      if (Tag(i) == Tag::IO) continue;
      EXPECT_EQ(acc.get(tier, Tag(i)).peak, pm.get(tier, Tag(i))) << tier_name(tier) << " " << tag_name(Tag(i));
    }
  const int64_t P = param_count(cfg), Pt = lora_param_count(cfg, lc), copies = Bf16Weights::adapter_bytes(cfg, lc);
  const int64_t dev = acc.get(Tier::Device, Tag::Weights).peak;
  const int64_t tied_copy = tied ? cfg.vocab * cfg.hidden * 2 : 0;
  EXPECT_EQ(dev, Pt * 4 + frozen_bf16_bytes(cfg) + tied_copy + copies) << "the base once, as it computes, beside the adapters";
  EXPECT_EQ(acc.get(Tier::Pinned, Tag::Weights).peak, 0) << "no fp32 masters pinned on the host";
  EXPECT_LT(frozen_bf16_bytes(cfg), P * 3) << "fewer bytes than the fp32 base";

  // B = 0: the model without LoRA under bf16, bit for bit; one base value one ulp away: not
  auto forward = [&](Backend& be, bool lora, int nudge) {
    ChunkPlan p = plan;
    if (!lora) p.lora = LoraConfig{};
    Model m(cfg, be, p);
    load_for_training(m, dir);
    if (lora) {
      Params zero_b(cfg, lora_layout(cfg, lc), Tier::Host, Tag::IO);
      init_lora(zero_b, base, 18);
      m.upload_trainable(zero_b);
    }
    if (nudge) {
      Params host(cfg, m.host_layout(), Tier::Host, Tag::IO);
      m.download_params(host);
      uint16_t* w = static_cast<uint16_t*>(host.layers[1].wdown.data);
      EXPECT_EQ(host.layers[1].wdown.dtype, DType::BF16);
      w[5] = uint16_t(w[5] + nudge);
      m.upload_params(host);
    }
    return m.evaluate(ids.data(), tg.data(), N).loss_sum;
  };
  for (bool on_sim_backend : {false, true}) {
    auto be = on_sim_backend ? make_sim_backend() : make_cpu_backend();
    const double plain = forward(*be, false, 0), frozen = forward(*be, true, 0), nudged = forward(*be, true, 1);
    EXPECT_EQ(std::memcmp(&plain, &frozen, 8), 0) << be->name() << ": " << plain << " vs " << frozen;
    EXPECT_NE(std::memcmp(&plain, &nudged, 8), 0) << be->name() << ": control";
    std::cout << fmt::format("[ lora bf16] {}, {}: B = 0 loss {} (without LoRA: {}); one base value one ulp away: "
                             "{}\n", tied ? "tied" : "untied", be->name(), frozen, plain, nudged);
  }
  if (tied) return;

  const ModelConfig q7 = preset_config("qwen2.5-7b");
  LoraConfig l7 = lc;
  l7.rank = 16;
  ChunkPlan p7{4096, 128};
  p7.lora = l7, p7.precision = DType::BF16;
  const MemoryPlan m7 = plan_memory(q7, p7, 131072, "adamw", 0, Tier::Device);
  std::cout << fmt::format("[ lora bf16] simulated device = CPU bit for bit over 3 steps; device weights {} B, the "
                           "fp32 base alone {} B, nothing pinned; Qwen2.5-7B, rank 16: device weights {}, pinned {}\n",
                           dev, P * 4, format_bytes(m7.get(Tier::Device, Tag::Weights)),
                           format_bytes(m7.get(Tier::Pinned, Tag::Weights)));
  EXPECT_EQ(m7.get(Tier::Pinned, Tag::Weights), 0);
}

TEST(Lora, Bf16HoldsTheFrozenBaseOnceInBf16) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    expect_frozen_bf16_base(tied);
  }
}

// A frozen bf16 base's fingerprint is that of its values widened to fp32: loaded from a bf16
// checkpoint, the fp32 masters' (so a LoRA checkpoint's base check does not depend on the
// layout); from an fp32 checkpoint whose values bf16 cannot hold, another (the control).
TEST(Lora, FrozenBf16BaseFingerprintIsItsValuesInFp32) {
  for (DType dtype : {DType::BF16, DType::F32}) {
    const fs::path dir = temp_dir(fmt::format("_lora_fp_{}", dtype_name(dtype)));
    const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("qwen2", 2), 23, dtype);
    Params fp32(cfg, Tier::Host, Tag::IO), mixed(cfg, frozen_bf16_layout(cfg), Tier::Host, Tag::IO);
    load_weights(dir, cfg, fp32);
    load_weights(dir, cfg, mixed);
    ASSERT_TRUE(mixed.mixed());
    if (dtype == DType::BF16) {
      EXPECT_EQ(params_fingerprint(mixed), params_fingerprint(fp32));
    } else {
      EXPECT_NE(params_fingerprint(mixed), params_fingerprint(fp32));
    }
  }
}

TEST(Lora, TrainableEmbeddingsAndNormsGetFullFineTuningsGradients) {
  const fs::path dir = fixture("qwen2");
  if (!fs::exists(dir / "lora/adapter_config.json")) OOMB_MISSING_REFERENCE("tests/fixtures/hf/qwen2/lora is missing");
  const ModelConfig cfg = load_config(dir);
  LoraConfig lc = load_adapter_config(dir / "lora");
  lc.train_embeddings_norms = true;
  std::vector<int32_t> ids = fixture_ids(SafetensorsFile::open(dir / "reference.safetensors"));
  const int64_t N = int64_t(ids.size());
  std::vector<int32_t> tg(ids.begin() + 1, ids.end());
  tg.push_back(-1);
  auto be = make_cpu_backend();
  ChunkPlan plan{13, 16};
  plan.lora = lc;
  Model m(cfg, *be, plan);
  load_weights(dir, cfg, m.params());
  load_adapter(dir / "lora", m.params(), m.trainable());  // PEFT's file has no embeddings: the base's
  m.enable_grads();
  m.forward_backward(ids.data(), tg.data(), N, 1.0f);
  Params merged(cfg, Tier::Host, Tag::IO);
  load_weights(dir, cfg, merged);
  merge_adapter(merged, m.trainable(), lc);
  Model full(cfg, *be, {13, 16});
  std::memcpy(full.params().flat().data, merged.flat().data, merged.flat().bytes());
  full.enable_grads();
  full.forward_backward(ids.data(), tg.data(), N, 1.0f);
  int n = 0;
  double worst = 0;
  for (const ParamSpec& s : m.grads().specs()) {
    if (s.name.find(".lora_") != std::string::npos) continue;
    const Tensor g = m.grads().view(s), want = full.grads().get(s.name);
    const double e = rel_error(g.f(), want.f(), size_t(s.numel()));
    EXPECT_LE(e, 1e-5) << s.name;  // measured <= 1.1e-6: merged weights round once more
    worst = std::max(worst, e), ++n;
  }
  EXPECT_EQ(n, 2 * cfg.layers + 2) << "the embedding, the final norm and two norms per layer";
  std::cout << fmt::format("[ lora     ] trainable embeddings and norms: {} tensors, worst rel. error against full "
                           "fine-tuning {:.2e}\n", n, worst);
}

TEST(Lora, BadInputIsNamed) {
  LoraConfig c;
  EXPECT_NE(error_of([&] { parse_lora_targets("q,qk", c); }).find("--lora-targets: 'qk' is not a module"),
            std::string::npos);
  c.rank = 0;
  parse_lora_targets("q", c);
  EXPECT_NE(error_of([&] { check_lora(c); }).find("--lora-rank"), std::string::npos);
  // an adapter made for another model: qwen2's (kv dim 8) on llama's shape (kv dim 16)
  if (!fs::exists(fixture("qwen2") / "lora/adapter_config.json")) return;
  const ModelConfig llama = load_config(fixture("llama"));
  const LoraConfig q2 = load_adapter_config(fixture("qwen2") / "lora");
  Params base(llama, Tier::Host, Tag::IO), t(llama, lora_layout(llama, q2), Tier::Host, Tag::IO);
  const std::string e = error_of([&] { load_adapter(fixture("qwen2") / "lora", base, t); });
  EXPECT_NE(e.find("adapter_model.safetensors: tensor '"), std::string::npos) << e;
  EXPECT_NE(e.find("another model"), std::string::npos) << e;
  // a config this engine cannot train, named with the file
  const fs::path bad = temp_dir("_badlora");
  nlohmann::json j;
  std::ifstream(fixture("qwen2") / "lora/adapter_config.json") >> j;
  j["lora_dropout"] = 1.0;
  std::ofstream(bad / "adapter_config.json") << j.dump();
  const std::string e2 = error_of([&] { load_adapter_config(bad); });
  EXPECT_NE(e2.find("adapter_config.json: lora_dropout: must be in [0, 1), got 1"), std::string::npos) << e2;
  j["lora_dropout"] = 0.0;
  j["target_modules"] = {"q_proj", "w_pack"};
  std::ofstream(bad / "adapter_config.json") << j.dump();
  const std::string e3 = error_of([&] { load_adapter_config(bad); });
  EXPECT_NE(e3.find("target_modules: 'w_pack'"), std::string::npos) << e3;
}

// adapter_config.json's fields this engine cannot take, each refused naming the file and the field
// (before, a field of the wrong type escaped as the JSON library's own error, and DoRA, lora_bias or a
// subset of layers loaded as plain LoRA on every layer); oomb's own config parses as written.
TEST(Lora, AdapterConfigRefusalsNameTheField) {
  const nlohmann::json good = {{"peft_type", "LORA"}, {"r", 16}, {"lora_alpha", 32.0}, {"lora_dropout", 0.0},
                               {"use_rslora", true}, {"target_modules", {"q_proj", "v_proj"}}, {"bias", "none"},
                               {"modules_to_save", {"embed_tokens"}}, {"rank_pattern", nlohmann::json::object()},
                               {"use_dora", false}, {"layers_to_transform", nullptr}};
  const LoraConfig c = parse_adapter_config(good, "a/adapter_config.json");
  EXPECT_EQ(c.rank, 16);
  EXPECT_EQ(c.alpha, 32.0);
  EXPECT_TRUE(c.rslora && c.train_embeddings_norms);
  EXPECT_EQ(c.target_names(), (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(c.dropout, 0.0);
  const LoraConfig back = parse_adapter_config(adapter_config_json(c, "m", {"embed_tokens"}), "b");
  EXPECT_TRUE(back.rank == c.rank && back.alpha == c.alpha && back.rslora && back.train_embeddings_norms);
  // PEFT's lora_dropout (a training choice) is read, and written back as it was
  nlohmann::json d = good;
  d["lora_dropout"] = 0.05;
  const LoraConfig cd = parse_adapter_config(d, "a/adapter_config.json");
  EXPECT_EQ(cd.dropout, 0.05);
  EXPECT_EQ(adapter_config_json(cd, "m", {}).at("lora_dropout").get<double>(), 0.05);
  const struct {
    const char* key;
    nlohmann::json value;
    const char* says;
  } bad[] = {
      {"use_rslora", "yes", "use_rslora must be true or false, got \"yes\""},
      {"lora_dropout", "0", "lora_dropout must be a number"},
      {"lora_dropout", 1.0, "lora_dropout: must be in [0, 1), got 1"},
      {"lora_dropout", -0.1, "lora_dropout: must be in [0, 1), got -0.1"},
      {"bias", 1, "bias 1 is not supported"},
      {"use_dora", true, "use_dora (DoRA) is not supported"},
      {"lora_bias", true, "lora_bias is not supported"},
      {"fan_in_fan_out", true, "fan_in_fan_out is not supported"},
      {"layers_to_transform", {0, 1}, "layers_to_transform (adapters on some layers only) is not supported"},
      {"rank_pattern", {{"q_proj", 8}}, "rank_pattern (per-module ranks) is not supported"},
      {"trainable_token_indices", {3}, "trainable_token_indices (trainable rows of the embedding) is not supported"},
      {"r", 0, "r must be a positive integer of at most 1048576, got 0"},
      {"r", -3, "r must be a positive integer"},
      {"r", 1.5, "r must be a positive integer"},
      {"r", int64_t(1) << 21, "r must be a positive integer of at most 1048576, got 2097152"},
      {"lora_alpha", 0, "lora_alpha must be a positive number"},
      {"target_modules", nlohmann::json::array(), "target_modules names no module"},
      {"target_modules", {"q_proj", 7}, "target_modules holds 7, not a name"},
      {"modules_to_save", "embed_tokens", "modules_to_save must be a list"},
      {"peft_type", "LOHA", "peft_type is \"LOHA\", not \"LORA\""},
  };
  for (const auto& b : bad) {
    nlohmann::json j = good;
    j[b.key] = b.value;
    const std::string e = error_of([&] { parse_adapter_config(j, "a/adapter_config.json"); });
    EXPECT_NE(e.find(std::string("a/adapter_config.json: ") + b.says), std::string::npos) << b.key << ": " << e;
  }
  nlohmann::json j = good;
  j.erase("r");
  EXPECT_NE(error_of([&] { parse_adapter_config(j, "f"); }).find("f: field 'r' is missing"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_adapter_config(nlohmann::json::array(), "f"); }).find("f: not a JSON object"),
            std::string::npos);
}
