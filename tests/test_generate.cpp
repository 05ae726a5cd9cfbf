// oomb generate: decoding token by token over the KV cache gives the logits of a from-scratch
// forward over the whole sequence; the sampler is greedy at temperature 0, reproducible per seed,
// draws by the softmax's probabilities, and top-p cuts the tail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <random>

#include "hf/checkpoint.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/model.h"
#include "train/sampling.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

// Phi-3 with LongRoPE switching at 12 positions: the prompt (9) decodes with the short factors, and
// at the 13th token every position takes the long ones (transformers drops its cache there), so each
// step still equals a full forward of the sequence so far.
nlohmann::json phi3_longrope() {
  nlohmann::json j = tiny_config_json("llama", 2);
  j["architectures"] = {"Phi3ForCausalLM"}, j["model_type"] = "phi3", j["original_max_position_embeddings"] = 12;
  j["pad_token_id"] = nullptr;
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0, 1.1, 1.2, 1.3}}, {"long_factor", {2.0, 5.0, 9.0, 30.0}}};
  return j;
}

// and turning half of each head (Phi-4-mini's partial rotation: 4 of 8 dims, two factors each)
nlohmann::json phi3_partial_longrope() {
  nlohmann::json j = phi3_longrope();
  j["partial_rotary_factor"] = 0.5;
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0, 1.2}}, {"long_factor", {3.0, 11.0}}};
  return j;
}

// SmolLM3 with its second layer NoPE
nlohmann::json nope_second_layer() {
  nlohmann::json j = tiny_config_json("smollm3", 2);
  j["no_rope_layers"] = {1, 0};
  return j;
}

// OLMo 3 with a window on its first layer (turned by the plain RoPE) and YaRN on its second
nlohmann::json olmo3_window_yarn() {
  nlohmann::json j = tiny_config_json("olmo3", 2);
  j["sliding_window"] = 4, j["layer_types"] = {"sliding_attention", "full_attention"};
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 8}};
  return j;
}

TEST(Generate, IncrementalDecodingEqualsAFullForward) {
  for (std::string arch :
       {"llama", "qwen3", "phi3", "phi3-partial", "granite", "smollm3", "olmo2", "olmo3", "gemma3", "glm", "glm4"}) {
    SCOPED_TRACE(arch);
    const auto dir = temp_dir("_" + arch);
    const ModelConfig cfg = write_tiny_model(dir, arch == "phi3"           ? phi3_longrope()
                                                  : arch == "phi3-partial" ? phi3_partial_longrope()
                                                  : arch == "granite"      ? tiny_granite_json(2)
                                                  : arch == "smollm3"      ? nope_second_layer()
                                                  : arch == "olmo3"        ? olmo3_window_yarn()
                                                  : arch == "gemma3"       ? tiny_gemma3_json(2)
                                                                           : tiny_config_json(arch, 2), 71);
    auto be = make_cpu_backend();
    Model inc(cfg, *be, ChunkPlan{5, 4}), full(cfg, *be, ChunkPlan{64, 16});
    load_weights(dir, cfg, inc.params());
    load_weights(dir, cfg, full.params());
    std::vector<int32_t> seq = {3, 17, 42, 8, 8, 30, 1, 59, 12};  // the prompt: two chunks of at most 5
    const int64_t total = int64_t(seq.size()) + 12;
    inc.begin_decode(total);
    std::vector<float> logits(static_cast<size_t>(cfg.vocab));
    inc.decode(seq.data(), 5, logits.data());
    inc.decode(seq.data() + 5, 4, logits.data());
    std::mt19937_64 rng(1);
    double worst = 0;
    while (int64_t(seq.size()) < total) {
      std::vector<float> ref(seq.size() * size_t(cfg.vocab));
      full.logits(seq.data(), int64_t(seq.size()), ref.data());
      const std::vector<float> last(ref.end() - cfg.vocab, ref.end());
      worst = std::max(worst, rel_error(logits, last));
      const int32_t next = sample_next(logits.data(), cfg.vocab, {}, rng);
      EXPECT_EQ(next, sample_next(last.data(), cfg.vocab, {}, rng)) << "greedy choices differ at " << seq.size();
      seq.push_back(next);
      if (int64_t(seq.size()) < total) inc.decode(&next, 1, logits.data());
    }
    EXPECT_LE(worst, 2e-6);  // measured 5.9e-7: the same math, chunked differently
    EXPECT_EQ(inc.decoded(), total - 1);
    EXPECT_THAT(error_of([&] { inc.decode(seq.data(), 2, logits.data()); }), ::testing::HasSubstr("exceed the"));
    inc.end_decode();
    EXPECT_EQ(inc.kv().pages_in_use(), 0);
  }
}

TEST(Generate, Sampling) {
  std::mt19937_64 rng(7);
  const float tie[] = {1.0f, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(sample_next(tie, 4, {}, rng), 1);  // greedy: the lowest index of the maximum
  EXPECT_EQ(sample_next(tie, 4, {1.0, 1e-6}, rng), 1);  // a nucleus of one token
  // two tokens with probabilities 1/4 and 3/4: the draws follow them
  const float two[] = {0.0f, float(std::log(3.0))};
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += sample_next(two, 2, {1.0, 1.0}, rng);
  EXPECT_NEAR(double(ones) / n, 0.75, 0.015);
  // top-p 0.7 of {0.5, 0.3, 0.2}: the two most likely tokens only
  const float three[] = {float(std::log(0.5)), float(std::log(0.3)), float(std::log(0.2))};
  for (int i = 0; i < 2000; ++i) EXPECT_NE(sample_next(three, 3, {1.0, 0.7}, rng), 2);
  // the same seed, the same draws
  std::mt19937_64 a(3), b(3);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_next(three, 3, {0.8, 1.0}, a), sample_next(three, 3, {0.8, 1.0}, b));
  EXPECT_THAT(error_of([&] { sample_next(three, 3, {-1.0, 1.0}, rng); }), ::testing::HasSubstr("--temperature"));
  EXPECT_THAT(error_of([&] { sample_next(three, 3, {1.0, 0.0}, rng); }), ::testing::HasSubstr("--top-p"));
}

}  // namespace
