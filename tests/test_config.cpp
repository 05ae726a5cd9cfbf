// config.json parsing, validation and round trip (rope_inv_freq: test_rope_inv_freq.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "core/error.h"
#include "hf/config.h"
#include "model/init.h"
#include "model/params.h"
#include "phi35_config.h"
#include "test_util.h"

using namespace oomb;
using json = nlohmann::json;

namespace {

const char* kQwen25 = R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
  "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
  "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.43.1",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

const char* kLlama3 = R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
  "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* kMistral = R"({"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0,
  "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 32768})";

const char* kV5 = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16",
  "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
  "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
  "vocab_size": 128256, "tie_word_embeddings": true, "bos_token_id": 128000, "eos_token_id": 128001,
  "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
  "transformers_version": "5.0.0"})";

json small() {  // a minimal valid Llama config
  return json{{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}, {"intermediate_size", 128},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
              {"vocab_size", 100}, {"max_position_embeddings", 128}};
}

void expect_error(const json& j, const std::string& want) {
  try {
    parse_config(j, "/models/x/config.json");
    ADD_FAILURE() << "no error, expected: " << want;
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_NE(m.find("/models/x/config.json"), std::string::npos) << m;
  }
}

json with(json j, const std::string& k, const json& v) {
  j[k] = v;
  return j;
}

#define SAME(f) EXPECT_EQ(a.f, b.f) << #f
void expect_same(const ModelConfig& a, const ModelConfig& b) {
  SAME(arch); SAME(architecture); SAME(model_type); SAME(hidden); SAME(intermediate); SAME(layers);
  SAME(heads); SAME(kv_heads); SAME(head_dim); SAME(vocab); SAME(max_position_embeddings); SAME(rms_norm_eps);
  SAME(tie_word_embeddings); SAME(qkv_bias); SAME(o_bias); SAME(mlp_bias); SAME(torch_dtype);
  SAME(bos_token_id); SAME(eos_token_id); SAME(rope.type); SAME(rope.theta); SAME(rope.factor);
  SAME(rope.low_freq_factor); SAME(rope.high_freq_factor); SAME(rope.original_max_position_embeddings);
  SAME(rope.attention_factor); SAME(rope.beta_fast); SAME(rope.beta_slow); SAME(rope.mscale);
  SAME(rope.mscale_all_dim); SAME(rope.truncate); SAME(rope.short_factor); SAME(rope.long_factor);
  SAME(rope.factor_given); SAME(rope.partial_rotary_factor); SAME(pad_token_id);
  SAME(layer_window); SAME(embedding_multiplier); SAME(residual_multiplier); SAME(attention_multiplier);
  SAME(logits_scaling); SAME(layer_rope);
}
#undef SAME

}  // namespace

TEST(Config, Qwen25) {
  ModelConfig c = parse_config(json::parse(kQwen25), "qwen.json");
  EXPECT_EQ(c.arch, Arch::Qwen2);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.hidden, 896);
  EXPECT_EQ(c.intermediate, 4864);
  EXPECT_EQ(c.layers, 24);
  EXPECT_EQ(c.heads, 14);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab, 151936);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_id, 151643);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_EQ(c.rope.theta, 1e6);
}

// Qwen3-0.6B's config.json as published (head_dim 128 beside hidden 1024 / 16 heads).
constexpr const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936
})";

TEST(Config, Qwen3) {
  ModelConfig c = parse_config(json::parse(kQwen3), "qwen3.json");
  EXPECT_EQ(c.arch, Arch::Qwen3);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_NE(c.head_dim * c.heads, c.hidden);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.eos_token_id, 151645);
  EXPECT_EQ(c.rope.theta, 1e6);
  // q_norm and k_norm per layer, after o_proj, as transformers names them
  const std::vector<ParamSpec> specs = param_layout(c);
  EXPECT_EQ(std::count_if(specs.begin(), specs.end(), [](const ParamSpec& s) { return s.name.ends_with("q_norm.weight"); }),
            28);
  EXPECT_EQ(specs[6].name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(specs[6].shape, std::vector<int64_t>{128});
  EXPECT_EQ(param_count(c), 596049920);  // Qwen3-0.6B: 0.6B parameters, embeddings tied
  // head_dim defaults to 128 in Qwen3Config, not to hidden / heads
  json nohd = json::parse(kQwen3);
  nohd.erase("head_dim");
  EXPECT_EQ(parse_config(nohd, "q.json").head_dim, 128);
  // attention_bias puts biases on q, k, v and o together
  ModelConfig b = parse_config(with(json::parse(kQwen3), "attention_bias", true), "q.json");
  EXPECT_TRUE(b.qkv_bias && b.o_bias && !b.mlp_bias);
  // the preset has the same shape
  const ModelConfig p = preset_config("qwen3-0.6b");
  EXPECT_EQ(param_count(p), param_count(c));
  EXPECT_EQ(p.head_dim, 128);
  EXPECT_TRUE(p.qk_norm);
  EXPECT_EQ(config_to_json(c)["attention_bias"], false);
  expect_same(c, parse_config(config_to_json(c), "again.json"));
  // use_sliding_window: the layers from max_window_layers (default 28) on
  json sw = with(with(json::parse(kQwen3), "use_sliding_window", true), "sliding_window", 4096);
  const ModelConfig w = parse_config(with(sw, "max_window_layers", 20), "s.json");
  EXPECT_EQ(w.layer_window[19], 0);
  EXPECT_EQ(w.layer_window[20], 4096);
  EXPECT_EQ(w.layer_window[27], 4096);
}

TEST(Config, Llama3) {
  ModelConfig c = parse_config(json::parse(kLlama3), "llama.json");
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.kv_heads, 8);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_id, 128001);
  EXPECT_EQ(c.raw["eos_token_id"].size(), 3u);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  ModelConfig b = parse_config(with(json::parse(kLlama3), "attention_bias", true), "llama.json");
  EXPECT_TRUE(b.qkv_bias && b.o_bias);
  b = parse_config(with(json::parse(kLlama3), "mlp_bias", true), "llama.json");
  EXPECT_TRUE(b.mlp_bias);
}

TEST(Config, Mistral) {
  ModelConfig c = parse_config(json::parse(kMistral), "mistral.json");
  EXPECT_EQ(c.arch, Arch::Mistral);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab, 32768);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
}

// The Mistral presets: 7B v0.3's is its config.json (kMistral) as read (but the dtype and token ids, as every preset), with its 7,248,023,552 parameters; NeMo
// 12B's has 12,247,782,400 (its model card's 12.2B), head_dim 128 beside hidden 5120.
TEST(Config, MistralPresets) {
  ModelConfig p = preset_config("mistral-7b-v0.3");
  p.layer_window.assign(size_t(p.layers), 0);  // (no window: said either way)
  const ModelConfig file = parse_config(json::parse(kMistral), "mistral.json");
  p.torch_dtype = file.torch_dtype, p.bos_token_id = file.bos_token_id, p.eos_token_id = file.eos_token_id;  // (a shape)
  expect_same(p, file);
  EXPECT_EQ(param_count(file), 7248023552);
  const ModelConfig nemo = preset_config("mistral-nemo-12b");
  EXPECT_EQ(nemo.head_dim, 128);
  EXPECT_EQ(nemo.max_position_embeddings, 1024000);
  EXPECT_EQ(param_count(nemo), 12247782400);
}

TEST(Config, Transformers5RopeParameters) {
  ModelConfig c = parse_config(json::parse(kV5), "v5.json");
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  // the dict's own rope_theta wins over a stale top-level one; rope_scaling (non-null) wins over rope_parameters
  json j = with(json::parse(kV5), "rope_theta", 10000.0);
  EXPECT_EQ(parse_config(j, "v5.json").rope.theta, 500000.0);
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse_config(j, "v5.json").rope.type, "linear");
  EXPECT_EQ(parse_config(j, "v5.json").rope.theta, 10000.0);
}

TEST(Config, Defaults) {
  ModelConfig c = parse_config(small(), "s.json");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);  // LlamaConfig's defaults
  EXPECT_EQ(c.eos_token_id, 2);
  json j = small();
  j.erase("num_key_value_heads");
  j["head_dim"] = nullptr;
  j["bos_token_id"] = nullptr;
  c = parse_config(j, "s.json");
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.bos_token_id, -1);
  j = small();
  j.erase("architectures");
  j["model_type"] = "mistral";
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse_config(j, "s.json").architecture, "MistralForCausalLM");
  // head_dim given explicitly need not divide hidden_size
  EXPECT_EQ(parse_config(with(with(small(), "hidden_size", 60), "head_dim", 32), "s.json").head_dim, 32);
  EXPECT_EQ(parse_config(with(small(), "eos_token_id", json::array()), "s.json").eos_token_id, -1);
}

TEST(ConfigErrors, Architecture) {
  expect_error(with(small(), "architectures", {"GPT2LMHeadModel"}),
               "unsupported architecture 'GPT2LMHeadModel' in field 'architectures[0]' (supported: "
               "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM, Phi3ForCausalLM, "
               "GraniteForCausalLM, SmolLM3ForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM, "
               "Gemma3ForCausalLM, GlmForCausalLM, Glm4ForCausalLM)");
  json j = small();
  j.erase("architectures");
  expect_error(with(j, "model_type", "gpt2"), "unsupported model_type 'gpt2'");
  expect_error(j, "missing field 'architectures'");
  expect_error(with(small(), "model_type", "qwen2"), "does not match model_type 'qwen2'");
  expect_error(with(small(), "architectures", json::array()), "must be a non-empty list of strings");
}

TEST(ConfigErrors, FieldsAndTypes) {
  json j = small();
  j.erase("hidden_size");
  expect_error(j, "missing required field 'hidden_size'");
  expect_error(with(small(), "hidden_size", "64"), "field 'hidden_size' must be an integer, got string \"64\"");
  expect_error(with(small(), "num_hidden_layers", 2.5), "field 'num_hidden_layers' must be an integer");
  expect_error(with(small(), "tie_word_embeddings", "yes"), "field 'tie_word_embeddings' must be true or false");
  expect_error(with(small(), "rms_norm_eps", "1e-5"), "field 'rms_norm_eps' must be a number");
  expect_error(with(small(), "torch_dtype", 16), "field 'torch_dtype' must be a string");
  expect_error(with(small(), "eos_token_id", {1, "x"}), "field 'eos_token_id' must be an integer");
  expect_error(with(small(), "rope_scaling", 3), "field 'rope_scaling' must be an object or null");
  expect_error(with(small(), "hidden_act", "gelu"), "hidden_act 'gelu' is not supported");
  expect_error(json::array(), "the top level must be a JSON object");
}

TEST(ConfigErrors, Sizes) {
  expect_error(with(small(), "num_hidden_layers", 0), "field 'num_hidden_layers' must be positive, got 0");
  expect_error(with(small(), "intermediate_size", -5), "field 'intermediate_size' must be positive, got -5");
  expect_error(with(small(), "vocab_size", 0), "field 'vocab_size' must be positive");
  expect_error(with(small(), "rms_norm_eps", 0.0), "field 'rms_norm_eps' must be positive");
  expect_error(with(small(), "num_key_value_heads", 3),
               "num_attention_heads (4) must be divisible by num_key_value_heads (3)");
  expect_error(with(small(), "hidden_size", 66),
               "hidden_size (66) must be divisible by num_attention_heads (4) when head_dim is not given");
  expect_error(with(small(), "head_dim", 15), "head_dim must be even for RoPE, got 15");
  expect_error(with(small(), "hidden_size", 36), "head_dim must be even for RoPE, got 9");
  expect_error(with(small(), "head_dim", 1000000000000), "field 'head_dim' = 1000000000000 exceeds the supported");
  expect_error(with(small(), "hidden_size", 1e12), "field 'hidden_size' = 1000000000000 exceeds the supported");
  expect_error(with(small(), "vocab_size", json::parse("18446744073709551615")), "field 'vocab_size' is too large");
  expect_error(with(small(), "rope_theta", INFINITY), "field 'rope_theta' must be finite");
}

// Sliding windows as transformers sets them, per layer; a window of 0 or a sliding layer without a
// window is an error naming the field.
TEST(ConfigErrors, SlidingWindowAndPartialRotary) {
  json m = json::parse(kMistral);
  EXPECT_EQ(parse_config(with(m, "sliding_window", 4096), "m").layer_window, std::vector<int64_t>(32, 4096));
  m.erase("sliding_window");  // MistralConfig's default
  EXPECT_EQ(parse_config(m, "m").layer_window, std::vector<int64_t>(32, 4096));
  EXPECT_EQ(parse_config(with(m, "sliding_window", nullptr), "m").layer_window, std::vector<int64_t>(32, 0));
  expect_error(with(m, "sliding_window", 0), "field 'sliding_window' = 0: a window of 0 keys");
  json q = with(json::parse(kQwen25), "use_sliding_window", true);  // sliding_window 32768 from layer 21
  q["max_window_layers"] = 21;
  const ModelConfig qc = parse_config(q, "q");
  EXPECT_EQ(qc.layer_window[20], 0);
  EXPECT_EQ(qc.layer_window[21], 32768);
  EXPECT_EQ(parse_config(json::parse(kQwen25), "q").layer_window, std::vector<int64_t>(24, 0));  // not used
  json lt = with(with(small(), "model_type", "qwen2"), "architectures", {"Qwen2ForCausalLM"});
  lt = with(with(lt, "use_sliding_window", true), "sliding_window", 7);
  EXPECT_EQ(parse_config(with(lt, "layer_types", {"sliding_attention", "full_attention"}), "s").layer_window,
            (std::vector<int64_t>{7, 0}));
  expect_error(with(lt, "layer_types", {"sliding_attention"}), "field 'layer_types'");
  expect_error(with(small(), "layer_types", {"full_attention", "sliding_attention"}),
               "layer_types asks for sliding_attention, but no sliding window is set (Llama has none)");
  expect_error(with(lt, "layer_types", {"chunked_attention", "full_attention"}),
               "layer_types entry \"chunked_attention\" is not supported");
  EXPECT_NO_THROW(parse_config(with(small(), "layer_types", {"full_attention", "full_attention"}), "s"));
  expect_error(with(small(), "partial_rotary_factor", 0.5), "field 'partial_rotary_factor' = 0.5 is not supported");
  EXPECT_NO_THROW(parse_config(with(small(), "partial_rotary_factor", 1.0), "s"));
  expect_error(with(small(), "rope_parameters", {{"rope_type", "default"}, {"partial_rotary_factor", 0.25}}),
               "field 'rope_parameters.partial_rotary_factor' = 0.25 is not supported");
}

TEST(ConfigErrors, Rope) {
  for (const char* t : {"dynamic", "su"})
    expect_error(with(small(), "rope_scaling", {{"type", t}, {"factor", 2.0}}),
                 std::string("unsupported rope_type '") + t +
                     "' in /models/x/config.json (supported: default, linear, llama3, yarn, longrope)");
  expect_error(with(small(), "rope_scaling", {{"type", "longrope"}, {"factor", 2.0}}),
               "'rope_scaling' with rope_type 'longrope' is missing required field 'short_factor'");
  expect_error(with(small(), "rope_parameters", {{"rope_type", "dynamic"}, {"factor", 2.0}}),
               "unsupported rope_type 'dynamic'");
  json l3 = {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}};
  expect_error(with(small(), "rope_scaling", l3),
               "'rope_scaling' with rope_type 'llama3' is missing required field 'low_freq_factor'");
  l3["low_freq_factor"] = 4.0;
  expect_error(with(small(), "rope_scaling", l3), "high_freq_factor (4) must be greater than low_freq_factor (4)");
  expect_error(with(small(), "rope_scaling", {{"rope_type", "linear"}}),
               "'rope_scaling' with rope_type 'linear' is missing required field 'factor'");
  expect_error(with(small(), "rope_scaling", {{"rope_type", "yarn"}}), "missing required field 'factor'");
  expect_error(with(small(), "rope_scaling", {{"rope_type", "linear"}, {"factor", -2.0}}),
               "field 'rope_scaling.factor' must be positive");
  expect_error(with(small(), "rope_scaling", {{"factor", 2.0}}), "'rope_scaling' has no 'rope_type' but sets 'factor'");
  expect_error(with(small(), "rope_parameters", {{"full_attention", {{"rope_type", "default"}}}}),
               "per-layer-type 'rope_parameters'");
  expect_error(with(small(), "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", 1}}),
               "field 'rope_scaling.truncate' must be true or false");
}

// Every preset (what oomb init and plan start from) is a config.json that reads back as the same config.
TEST(Config, EveryPresetReadsBackTheSame) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    ModelConfig p = preset_config(name);
    const ModelConfig back = parse_config(config_to_json(p), name + "/config.json");
    if (p.layer_window.empty()) p.layer_window.assign(size_t(p.layers), 0);  // (no window: said either way)
    expect_same(p, back);
    EXPECT_EQ(param_count(back), param_count(p));
  }
}

TEST(Config, Phi3) {
  const ModelConfig c = parse_config(phi35(), "phi.json");
  EXPECT_EQ(c.arch, Arch::Phi3);
  EXPECT_TRUE(c.fused_projections());
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_EQ(c.kv_heads, 32);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm);
  EXPECT_EQ(c.layer_window, std::vector<int64_t>(32, 262144));  // Phi-3 passes sliding_window on every layer
  EXPECT_EQ(c.rope.type, "longrope");
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope.factor, 32.0);  // max_position_embeddings / original_max_position_embeddings
  EXPECT_EQ(c.rope.short_factor.size(), 48u);
  EXPECT_EQ(c.rope.long_factor[47], 1.0 + 1.5 * 47);
  EXPECT_EQ(c.eos_token_id, 32000);
  EXPECT_EQ(c.pad_token_id, 32000);
  // defaults of Phi3Config: no sliding window, rms_norm_eps 1e-5, bos 1, eos 32000
  json d = phi35();
  for (const char* k : {"sliding_window", "rms_norm_eps", "bos_token_id", "eos_token_id", "rope_scaling"}) d.erase(k);
  const ModelConfig e = parse_config(d, "phi_defaults.json");
  EXPECT_EQ(e.layer_window, std::vector<int64_t>(32, 0));
  EXPECT_EQ(e.rms_norm_eps, 1e-5);
  EXPECT_EQ(e.bos_token_id, 1);
  EXPECT_EQ(e.eos_token_id, 32000);
  EXPECT_EQ(e.pad_token_id, 32000);  // absent: Phi3Config's 32000; null: none
  EXPECT_EQ(parse_config(with(d, "pad_token_id", nullptr), "phi_null_pad.json").pad_token_id, -1);
  EXPECT_EQ(parse_config(small(), "s").pad_token_id, -1);  // LlamaConfig's default: none
  EXPECT_EQ(parse_config(with(small(), "pad_token_id", -1), "s").pad_token_id, 99);  // nn.Embedding's negative index
  EXPECT_EQ(config_to_json(parse_config(with(small(), "pad_token_id", -1), "s"))["pad_token_id"], -1);
  EXPECT_FALSE(config_to_json(parse_config(small(), "s")).contains("pad_token_id"));
  EXPECT_EQ(config_to_json(parse_config(with(d, "pad_token_id", nullptr), "p"))["pad_token_id"], nullptr);
  EXPECT_EQ(e.rope.type, "default");
  // the legacy spellings Phi3Config reads as longrope; a Llama takes neither "su" nor a yarn without factor
  for (const char* t : {"su", "yarn"}) {
    json l = phi35();
    l["rope_scaling"]["type"] = t;
    EXPECT_EQ(parse_config(l, "phi_legacy.json").rope.type, "longrope") << t;
  }
  // round trip: the factors, the top-level original_max_position_embeddings, the window
  const json out = config_to_json(c);
  EXPECT_EQ(out["original_max_position_embeddings"], 4096);
  EXPECT_EQ(out["rope_scaling"]["long_factor"], phi35()["rope_scaling"]["long_factor"]);
  EXPECT_FALSE(out["rope_scaling"].contains("factor"));
  EXPECT_EQ(out["sliding_window"], 262144);
  expect_same(c, parse_config(out, "phi_out.json"));
  expect_same(e, parse_config(config_to_json(e), "phi_defaults_out.json"));
}

TEST(ConfigErrors, Phi3AndLongRope) {
  json p = phi35();
  p["rope_scaling"]["long_factor"].erase(0);
  expect_error(p, "field 'rope_scaling.long_factor' has 47 entries; 96 rotary dims need 48");
  p = phi35();
  p["rope_scaling"].erase("short_factor");
  expect_error(p, "'rope_scaling' with rope_type 'longrope' is missing required field 'short_factor'");
  p = phi35();
  p["rope_scaling"]["short_factor"][3] = 0;
  expect_error(p, "field 'rope_scaling.short_factor[3]' must be a positive number, got 0");
  p = phi35();
  p["rope_scaling"]["short_factor"] = "1.0";
  expect_error(p, "field 'rope_scaling.short_factor' must be a list of numbers");
  json l = small();  // longrope switching at 1, with its default attention factor: ln 1 = 0
  l["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", json::array({1, 1, 1, 1, 1, 1, 1, 1})},
                       {"long_factor", json::array({2, 2, 2, 2, 2, 2, 2, 2})}, {"original_max_position_embeddings", 1}};
  expect_error(l, "longrope's default attention_factor divides by ln(original_max_position_embeddings) = ln 1 = 0");
  l["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_NO_THROW(parse_config(l, "l"));
  expect_error(with(small(), "pad_token_id", 100), "field 'pad_token_id' = 100 is outside the vocabulary (vocab_size 100)");
  expect_error(with(small(), "pad_token_id", -101), "field 'pad_token_id' = -101 is outside the vocabulary");
  json tiny_phi = with(small(), "architectures", {"Phi3ForCausalLM"});
  expect_error(tiny_phi, "no 'pad_token_id', and Phi3ForCausalLM's default 32000 is outside the vocabulary");
  EXPECT_EQ(parse_config(with(tiny_phi, "pad_token_id", nullptr), "p").pad_token_id, -1);
  // dropout: refused for training only (transformers drops out in training), naming the field
  for (const char* k : {"resid_pdrop", "attention_dropout"}) {
    const ModelConfig d = parse_config(with(phi35(), k, 0.1), "d.json");  // (eval and generate: no dropout)
    try {
      check_training_dropout(d, "/m/config.json");
      ADD_FAILURE() << k;
    } catch (const Error& e) {
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr(fmt::format(
          "config /m/config.json: field '{}' = 0.1: transformers would train with this dropout", k)));
    }
  }
  EXPECT_NO_THROW(check_training_dropout(parse_config(with(phi35(), "embd_pdrop", 0.1), "e"), "e"));  // read by no layer
  EXPECT_NO_THROW(check_training_dropout(parse_config(with(small(), "resid_pdrop", 0.1), "r"), "r"));  // not Llama's
  EXPECT_ANY_THROW(check_training_dropout(parse_config(with(small(), "attention_dropout", 0.1), "a"), "a"));
  EXPECT_NO_THROW(check_training_dropout(parse_config(phi35(), "p"), "p"));
}

// LongRoPE's lengths and factor, as transformers 5 resolves them (standardize_rope_params, then
// _compute_longrope_parameters)
TEST(Config, LongRopeLengthsAndFactor) {
  json p = phi35();
  p.erase("original_max_position_embeddings");  // Phi3Config's own: 4096, whatever the dict says
  p["rope_scaling"]["original_max_position_embeddings"] = 1000;
  ModelConfig c = parse_config(p, "p");
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope.factor, 32.0);
  p["rope_scaling"]["factor"] = 4.0;  // a factor given is the factor
  c = parse_config(p, "p");
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(config_to_json(c)["rope_scaling"]["factor"], 4.0);
  expect_same(c, parse_config(config_to_json(c), "p_out"));
  // a Llama: the top-level length, else the dict's, else max_position_embeddings (128)
  json l = small();
  l["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", json::array({1, 1, 1, 1, 1, 1, 1, 1})},
                       {"long_factor", json::array({2, 2, 2, 2, 2, 2, 2, 2})}};
  EXPECT_EQ(parse_config(l, "l").rope.original_max_position_embeddings, 128);
  EXPECT_EQ(parse_config(l, "l").rope.factor, 1.0);
  l["rope_scaling"]["original_max_position_embeddings"] = 32;
  c = parse_config(l, "l");
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32);
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_FALSE(config_to_json(c).contains("original_max_position_embeddings"));  // it stays in the dict
  expect_same(c, parse_config(config_to_json(c), "l_out"));
  l["original_max_position_embeddings"] = 16;
  c = parse_config(l, "l");
  EXPECT_EQ(c.rope.original_max_position_embeddings, 16);
  EXPECT_EQ(c.rope.factor, 8.0);
  expect_same(c, parse_config(config_to_json(c), "l_out2"));
  // a Phi-3's LongRoPE is written as transformers 4.x's Phi3Config takes it: type, short_factor, long_factor
  json written = config_to_json(parse_config(phi35(), "p"))["rope_scaling"];
  EXPECT_EQ(written.size(), 3u);
  EXPECT_EQ(written["type"], "longrope");
}

// transformers reads `rope_scaling or rope_parameters`: an empty rope_scaling is none, and the dict not
// read leaves nothing behind in what oomb writes
TEST(Config, RopeDictTransformersReads) {
  json l = small();
  l["rope_scaling"] = json::object();
  l["rope_parameters"] = {{"rope_type", "longrope"}, {"short_factor", json::array({1, 1, 1, 1, 1, 1, 1, 1})},
                          {"long_factor", json::array({2, 2, 2, 2, 2, 2, 2, 2})}};
  EXPECT_EQ(parse_config(l, "l").rope.type, "longrope");
  json d = small();
  d["rope_scaling"] = {{"rope_type", "default"}};
  d["rope_parameters"] = {{"partial_rotary_factor", 0.5}};  // not read: rope_scaling is
  const ModelConfig c = parse_config(d, "d");
  const json out = config_to_json(c);
  EXPECT_FALSE(out["rope_parameters"].contains("partial_rotary_factor"));
  expect_same(c, parse_config(out, "d_out"));
}

// the tables are float32, as transformers keeps them: a value that overflows there is refused
TEST(ConfigErrors, RopeBeyondFloat32) {
  json l = small();
  l["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", json::array({1, 1, 1, 1, 1, 1, 1, 1})},
                       {"long_factor", json::array({2, 2, 2, 2, 2, 2, 2, 2})}, {"attention_factor", 1.5e99}};
  expect_error(l, "gives a non-finite attention scaling in float32");
  l["rope_scaling"].erase("attention_factor");
  l["rope_scaling"]["short_factor"][2] = 1e-45;
  expect_error(l, "gives a non-finite inverse frequency in float32");
  expect_error(with(small(), "rope_theta", 1e-300), "gives a non-finite inverse frequency in float32");
}

TEST(Config, Yarn) {
  json j = with(small(), "rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}});
  ModelConfig c = parse_config(j, "y.json");
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32);
  EXPECT_TRUE(c.rope.truncate);
  EXPECT_EQ(c.rope.beta_fast, 32.0);
  EXPECT_EQ(c.rope.beta_slow, 1.0);
  // factor null -> max_position_embeddings / original_max_position_embeddings; truncate null -> false
  j["rope_scaling"]["factor"] = nullptr;
  j["rope_scaling"]["truncate"] = nullptr;
  c = parse_config(j, "y.json");
  EXPECT_EQ(c.rope.factor, 128.0 / 32.0);
  EXPECT_FALSE(c.rope.truncate);
  // absent original_max_position_embeddings stays absent (0); a top-level one wins (transformers 5)
  j["rope_scaling"].erase("original_max_position_embeddings");
  j["rope_scaling"]["factor"] = 2.0;
  EXPECT_EQ(parse_config(j, "y.json").rope.original_max_position_embeddings, 0);
  j["original_max_position_embeddings"] = 64;
  EXPECT_EQ(parse_config(j, "y.json").rope.original_max_position_embeddings, 64);
}

TEST(Config, RoundTrip) {
  json yarn = with(json::parse(kQwen25), "rope_scaling",
                   {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768},
                    {"mscale", 0.707}, {"mscale_all_dim", 1.0}, {"truncate", false}});
  for (const json& j : {json::parse(kQwen25), json::parse(kLlama3), json::parse(kMistral), json::parse(kV5),
                        yarn, small()}) {
    ModelConfig a = parse_config(j, "a.json");
    json out = config_to_json(a);
    ModelConfig b = parse_config(json::parse(out.dump(2)), "b.json");
    expect_same(a, b);
    for (const auto& [k, v] : j.items()) {  // unknown fields survive
      if (k == "transformers_version" || k == "initializer_range" || k == "use_cache") {
        EXPECT_EQ(out[k], v) << k;
      }
    }
    EXPECT_EQ(out["architectures"][0], a.architecture);
    EXPECT_EQ(out["torch_dtype"], a.torch_dtype);
    EXPECT_EQ(out.contains("rope_parameters"), j.contains("rope_parameters"));
    EXPECT_EQ(config_to_json(b), out);  // a fixed point
  }
  json l = config_to_json(parse_config(json::parse(kLlama3), "l.json"));
  EXPECT_EQ(l["eos_token_id"], json({128001, 128008, 128009}));
  EXPECT_EQ(l["rope_scaling"]["rope_type"], "llama3");
  json v5 = config_to_json(parse_config(json::parse(kV5), "v5.json"));
  EXPECT_EQ(v5["rope_parameters"]["factor"], 32.0);
  EXPECT_EQ(v5["rope_parameters"]["rope_theta"], 500000.0);
  EXPECT_EQ(v5["dtype"], "bfloat16");
  // a changed config is written back in step, both rope forms included
  ModelConfig c = parse_config(json::parse(kV5), "v5.json");
  c.rope = RopeConfig{};
  c.rope.theta = 1234.0;
  json d = config_to_json(c);
  EXPECT_TRUE(d["rope_scaling"].is_null());
  EXPECT_EQ(d["rope_parameters"], json({{"rope_type", "default"}, {"rope_theta", 1234.0}}));
  EXPECT_EQ(parse_config(d, "d.json").rope.type, "default");
  c = parse_config(json::parse(kQwen25), "q.json");
  c.qkv_bias = false;
  EXPECT_THROW(config_to_json(c), Error);
}

TEST(Config, LoadConfig) {
  auto dir = oomb::testing::temp_dir();
  oomb::testing::write_bytes(dir / "config.json", kMistral);
  EXPECT_EQ(load_config(dir).arch, Arch::Mistral);
  EXPECT_EQ(load_config(dir / "config.json").hidden, 4096);
  oomb::testing::write_bytes(dir / "bad.json", "{\n  \"hidden_size\": 4,\n  oops\n}\n");
  try {
    load_config(dir / "bad.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("bad.json"), std::string::npos) << m;
    EXPECT_NE(m.find("line 3, column 3"), std::string::npos) << m;
  }
  try {
    load_config(dir / "missing");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  oomb::testing::write_bytes(dir / "big.json", "{\"hidden_size\": 1e400}");
  EXPECT_THROW(load_config(dir / "big.json"), Error);
  oomb::testing::write_bytes(dir / "mistral_sw.json", with(json::parse(kMistral), "sliding_window", 4096).dump());
  EXPECT_EQ(load_config(dir / "mistral_sw.json").layer_window, std::vector<int64_t>(32, 4096));
}
