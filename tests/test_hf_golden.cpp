// The engine against Hugging Face's own modelling code: fixtures made by tools/golden_hf.py
// (transformers, float64, from the float32 weights saved beside them) hold the loss, the logits
// and every gradient of tiny Llama, Qwen2, Qwen3 and Phi-3 models (Phi-3's: LongRoPE's long factors, a pad
// token). Full-sequence and chunk-recurrent runs must
// agree. Skips, saying why, while the fixtures have not been generated (they need transformers).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cmath>

#include "backend/backend.h"
#include "hf/checkpoint.h"
#include "train/model.h"
#include "hf/safetensors.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

std::vector<double> f64(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  EXPECT_EQ(t->dtype, DType::F64) << name;
  std::vector<double> v(size_t(t->numel()));
  f.read_raw(*t, v.data());
  return v;
}

double rel(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

class HfGolden : public ::testing::TestWithParam<const char*> {};

// transformers' gradient of the parameter s: its own, or (Phi-3) its rows of the fused tensor
std::vector<double> hf_grad(const SafetensorsFile& ref, const ModelConfig& cfg, const ParamSpec& s) {
  int64_t row0, total;
  const std::vector<double> whole = f64(ref, "grad/" + hf_tensor_of(cfg, s.name, row0, total));
  if (total < 0) return whole;
  const auto first = whole.begin() + row0 * s.shape[1];
  return std::vector<double>(first, first + s.numel());
}

}  // namespace

TEST_P(HfGolden, LossLogitsAndEveryGradient) {
  const auto dir = source_dir() / "tests/fixtures/hf" / GetParam();
  // Phi-3's, Granite's, SmolLM3's, OLMo 2's and 3's, Gemma 3's and GLM's fixtures are new to tools/golden_hf.py (2026-11-30
  // to 12-02):
  // no GPU session has made them yet, so they are pending, not a broken checkout (drop this once committed)
  const std::string name = GetParam();
  if ((name == "phi3" || name == "phi3_partial" || name == "granite" || name == "smollm3" || name == "olmo2" ||
       name == "olmo3" || name == "gemma3" || name == "glm" || name == "glm4") &&
      !std::filesystem::exists(dir / "reference.safetensors"))
    GTEST_SKIP() << "tests/fixtures/hf/" << name << " is not made yet: the next GPU session's `python3 "
                    "tools/golden_hf.py` makes it (scripts/gpu_session.sh golden_hf)";
  if (!std::filesystem::exists(dir / "reference.safetensors"))  // committed: missing means a broken checkout
    OOMB_MISSING_REFERENCE(fmt::format("tests/fixtures/hf/{} is missing: it is made by `python3 tools/golden_hf.py` "
                                       "where PyTorch and transformers exist (the GPU machine has both)", GetParam()));
  const ModelConfig cfg = load_config(dir);
  const SafetensorsFile ref = SafetensorsFile::open(dir / "reference.safetensors");
  const TensorInfo* it = ref.find("input_ids");
  ASSERT_NE(it, nullptr);
  std::vector<int64_t> ids64(size_t(it->numel()));
  ref.read_raw(*it, ids64.data());
  const int64_t N = int64_t(ids64.size());
  std::vector<int32_t> ids(ids64.begin(), ids64.end()), targets(ids.begin() + 1, ids.end());
  targets.push_back(-1);  // the last position has no next token
  const double loss = f64(ref, "loss").at(0);
  auto be = make_cpu_backend();
  for (int64_t C : {N, int64_t(7)}) {
    SCOPED_TRACE(fmt::format("{} C={}", GetParam(), C));
    Model m(cfg, *be, {C, 16});
    load_weights(dir, cfg, m.params());
    m.enable_grads();
    const LossStats ls = m.forward_backward(ids.data(), targets.data(), N, 1.0f);
    EXPECT_NEAR(ls.loss_sum / double(ls.targets), loss, 1e-6 * loss);
    double worst = 0;
    for (const ParamSpec& s : m.grads().specs()) {
      const auto want = hf_grad(ref, cfg, s);
      const Tensor g = m.grads().view(s);
      ASSERT_EQ(int64_t(want.size()), s.numel()) << s.name;
      const double e = rel(std::vector<float>(g.f(), g.f() + s.numel()), want);
      // measured <= 7.1e-6 (qwen2's q/k biases): transformers rounds RoPE, RMSNorm and softmax in fp32
      EXPECT_LE(e, 2e-5) << s.name;
      worst = std::max(worst, e);
    }
    std::vector<float> lg(static_cast<size_t>(N * cfg.vocab));
    m.logits(ids.data(), N, lg.data());
    const double le = rel(lg, f64(ref, "logits"));
    EXPECT_LE(le, 2e-6);  // measured <= 5.0e-7
    std::cout << fmt::format("[ hf       ] {} C={}: loss {:.6f} (HF {:.6f}), worst gradient rel. error {:.2e}, logits "
                             "{:.2e}\n", GetParam(), C, ls.loss_sum / double(ls.targets), loss, worst, le);
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, HfGolden, ::testing::Values("llama", "qwen2", "qwen3", "phi3", "phi3_partial", "granite",
                                                              "smollm3", "olmo2", "olmo3", "gemma3", "glm", "glm4"));

// Model::logits agrees with the fused loss: cross-entropy from the logits equals evaluate()'s, for
// a vocabulary of one lm_head tile and of three (each tile's rows copied into theirs of the
// logits), on the CPU and the simulated device.
TEST(ModelLogits, AgreeWithTheFusedLoss) {
  for (const int64_t V : {61, 20000})
    for (const bool sim : {false, true}) {
      SCOPED_TRACE(fmt::format("V = {}{}", V, sim ? ", sim" : ""));
      nlohmann::json j = nlohmann::json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "tie_word_embeddings": false})");
      j["vocab_size"] = V;
      const ModelConfig cfg = parse_config(j, "test");
      auto be = sim ? make_sim_backend() : make_cpu_backend();
      Model m(cfg, *be, {9, 16});
      Params host(cfg, Tier::Host, Tag::IO);
      for (int64_t i = 0; i < host.flat().numel(); ++i) host.flat().f()[i] = float(std::sin(double(i))) * 0.2f;
      m.upload_params(host);
      const int64_t N = 30;
      std::vector<int32_t> ids(static_cast<size_t>(N)), tg(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i)
        ids[size_t(i)] = int32_t((i * 13 + 5) % V), tg[size_t(i)] = int32_t((i * 7919 + 2) % V);
      const LossStats ev = m.evaluate(ids.data(), tg.data(), N);
      std::vector<float> lg(static_cast<size_t>(N * V));
      m.logits(ids.data(), N, lg.data());
      double loss = 0;
      for (int64_t t = 0; t < N; ++t) {
        const float* r = lg.data() + t * V;
        double mx = r[0], s = 0;
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(r[v]));
        for (int64_t v = 0; v < V; ++v) s += std::exp(double(r[v]) - mx);
        loss += mx + std::log(s) - double(r[tg[size_t(t)]]);
      }
      EXPECT_NEAR(loss, ev.loss_sum, 1e-11 * ev.loss_sum);  // measured 6.8e-13: the same fp32 logits, summed in f64
    }
}
