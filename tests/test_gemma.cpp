// Gemma 3 (Gemma3ForCausalLM, model_type gemma3_text; hf/config.h): each layer normalizes its branches'
// inputs and outputs (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
// post_feedforward_layernorm), every norm scales by 1 + w, q and k are normalized per head, GELU's tanh
// approximation gates the MLP, the embedding is scaled by sqrt(hidden_size) and the scores by
// query_pre_attn_scalar^-1/2; five sliding layers of six turn q and k by the plain RoPE of
// rope_local_base_freq. Here: its config.json read with Gemma3TextConfig's defaults, refused where the
// engine cannot follow it, written back the same; the parameters as transformers names and shapes
// them; the presets' counts; the bits of --keep-attention; bf16 against fp32; oomb init and a CLI run
// that trains and saves one. (Its loss and gradients against the float64 oracle:
// Oracle.Gemma3SandwichNormsAndGelu; the ops: CpuOps' RmsNormWithWeightOffset and GeGluForwardBackward,
// CudaOps on simt; transformers' own Gemma 3: pending until a GPU session commits its fixture.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <fmt/format.h>
#include <iostream>

#include "hf/config.h"
#include "hf/safetensors.h"
#include "model/init.h"
#include "model/memory_plan.h"
#include "model/params.h"
#include "model/rope.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// gemma-3-1b-it's config.json (transformers 4.50's form: sliding_window_pattern, rope_local_base_freq)
json gemma3_1b() {
  return {{"architectures", {"Gemma3ForCausalLM"}}, {"attention_bias", false}, {"attention_dropout", 0.0},
          {"attn_logit_softcapping", nullptr}, {"bos_token_id", 2}, {"cache_implementation", "hybrid"},
          {"eos_token_id", {1, 106}}, {"final_logit_softcapping", nullptr}, {"head_dim", 256},
          {"hidden_activation", "gelu_pytorch_tanh"}, {"hidden_size", 1152}, {"initializer_range", 0.02},
          {"intermediate_size", 6912}, {"max_position_embeddings", 32768}, {"model_type", "gemma3_text"},
          {"num_attention_heads", 4}, {"num_hidden_layers", 26}, {"num_key_value_heads", 1}, {"pad_token_id", 0},
          {"query_pre_attn_scalar", 256}, {"rms_norm_eps", 1e-06}, {"rope_local_base_freq", 10000},
          {"rope_scaling", nullptr}, {"rope_theta", 1000000}, {"sliding_window", 512}, {"sliding_window_pattern", 6},
          {"torch_dtype", "bfloat16"}, {"use_cache", true}, {"vocab_size", 262144}};
}

std::string refusal(const json& j) {
  return error_of([&] { parse_config(j, "gemma3.json"); });
}

TEST(Gemma3, ReadsItsConfig) {
  const ModelConfig c = parse_config(gemma3_1b(), "gemma3.json");
  EXPECT_EQ(c.arch, Arch::Gemma3);
  EXPECT_TRUE(c.pre_norm() && c.post_norm());
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qk_norm_full());
  EXPECT_EQ(c.norm_offset(), 1.0f);
  EXPECT_EQ(c.mlp_act(), Act::GeluTanh);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.sliding_rope_theta, 10000.0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(attention_scale(c), 1.0f / 16.0f);                    // 256^-1/2
  EXPECT_EQ(c.embed_scale(), double(float(std::sqrt(1152.0))));  // (33.941...)
  for (int64_t l = 0; l < 26; ++l) {
    const bool full = (l + 1) % 6 == 0;
    EXPECT_EQ(c.layer_window[size_t(l)], full ? 0 : 512) << l;
    EXPECT_EQ(c.rope_scaled(l), full) << l;
  }
  // transformers' names and shapes: four norms of d, the q/k norms per head
  const std::string l = "model.layers.5.";
  for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight",
                        "post_feedforward_layernorm.weight"})
    EXPECT_EQ(param_shape(c, l + n), std::vector<int64_t>{1152}) << n;
  EXPECT_EQ(param_shape(c, l + "self_attn.q_norm.weight"), std::vector<int64_t>{256});
  EXPECT_EQ(param_shape(c, l + "self_attn.k_norm.weight"), std::vector<int64_t>{256});
  EXPECT_TRUE(param_shape(c, "lm_head.weight").empty());
  // the preset is this model: its parameters counted here from the shapes (tied)
  const int64_t d = 1152, I = 6912, q = 4 * 256, kv = 256;
  const int64_t layer = d * q + 2 * d * kv + q * d + 3 * I * d + 4 * d + 2 * 256;
  EXPECT_EQ(param_count(c), 262144 * d + 26 * layer + d);
  const ModelConfig p = preset_config("gemma3-1b");
  EXPECT_EQ(param_count(p), param_count(c));
  EXPECT_EQ(param_layout(p).size(), param_layout(c).size());
  EXPECT_EQ(p.layer_window, c.layer_window);
  EXPECT_EQ(p.query_pre_attn_scalar, 256);
  EXPECT_EQ(p.sliding_rope_theta, 10000.0);
  // the 4B's language model: linear x8 on its full layers alone
  const ModelConfig four = preset_config("gemma3-4b");
  EXPECT_EQ(four.rope.type, "linear");
  EXPECT_EQ(four.layer_window[0], 1024);
  EXPECT_EQ(workspace_shape(four, ChunkPlan{16, 8}).rope_tables, 2);
}

// Gemma3TextConfig's defaults where the file says nothing: rms_norm_eps 1e-6, bos 2, eos 1, pad 0, tied,
// 131072 positions, rope_theta 1e6 and rope_local_base_freq 1e4, head_dim 256 (not hidden / heads), 4 KV
// heads (not the head count), query_pre_attn_scalar 256, a window of 4096 on five layers of every six.
TEST(Gemma3, DefaultsAreGemma3TextConfigs) {
  json j = tiny_config_json("gemma3_text", 2);
  for (const char* k : {"rms_norm_eps", "max_position_embeddings", "rope_theta", "tie_word_embeddings", "head_dim",
                        "num_key_value_heads"})
    j.erase(k);
  j["num_hidden_layers"] = 7;
  j["num_attention_heads"] = 8;  // (4 KV heads where absent, not the head count)
  const ModelConfig c = parse_config(j, "gemma3.json");
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.sliding_rope_theta, 1e4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.query_pre_attn_scalar, 256);
  EXPECT_EQ(c.layer_window, (std::vector<int64_t>{4096, 4096, 4096, 4096, 4096, 0, 4096}));
  j["attention_bias"] = true, j["mlp_bias"] = true;
  const ModelConfig b = parse_config(j, "b.json");
  EXPECT_TRUE(b.qkv_bias && b.o_bias);
  EXPECT_FALSE(b.mlp_bias);  // (Gemma3MLP has none)
  j["sliding_window_pattern"] = 2;
  const ModelConfig two = parse_config(j, "p.json");
  EXPECT_EQ(two.layer_window, (std::vector<int64_t>{4096, 0, 4096, 0, 4096, 0, 4096}));
  EXPECT_EQ(config_to_json(two)["sliding_window_pattern"], 2);
  j["layer_types"] = json::array();  // (layer_types given: the pattern unread, as transformers leaves it)
  for (int l = 0; l < 7; ++l) j["layer_types"].push_back(l == 3 ? "full_attention" : "sliding_attention");
  j["sliding_window_pattern"] = "not read";
  const ModelConfig typed = parse_config(j, "t.json");
  EXPECT_EQ(typed.layer_window, (std::vector<int64_t>{4096, 4096, 4096, 0, 4096, 4096, 4096}));
  EXPECT_EQ(config_to_json(typed)["sliding_window_pattern"], 4);
}

TEST(Gemma3, RefusedWhereItCannotBeFollowed) {
  const json j = tiny_config_json("gemma3_text", 2);
  auto with = [&](const char* k, const json& v) {
    json m = j;
    m[k] = v;
    return refusal(m);
  };
  EXPECT_THAT(with("hidden_activation", "gelu"), HasSubstr("hidden_activation 'gelu' is not supported (Gemma 3's is "
                                                           "gelu_pytorch_tanh)"));
  EXPECT_THAT(with("final_logit_softcapping", 30.0), HasSubstr("field 'final_logit_softcapping' = 30.0: softcapping "
                                                               "(Gemma 2's) is not supported"));
  EXPECT_THAT(with("attn_logit_softcapping", 50.0), HasSubstr("field 'attn_logit_softcapping' = 50.0"));
  EXPECT_THAT(with("use_bidirectional_attention", true), HasSubstr("'use_bidirectional_attention' is true"));
  EXPECT_THAT(with("query_pre_attn_scalar", 0), HasSubstr("'query_pre_attn_scalar' must be positive"));
  EXPECT_THAT(with("sliding_window", nullptr), HasSubstr("Gemma3ForCausalLM's sliding_window is null, but its "
                                                         "config's layer_types (absent here) slide five layers of "
                                                         "every six"));
  EXPECT_THAT(with("rope_local_base_freq", 1.0), HasSubstr("'rope_local_base_freq' must be above 1"));
  json vision = j;
  vision["architectures"] = {"Gemma3ForConditionalGeneration"};
  vision["model_type"] = "gemma3";
  EXPECT_THAT(refusal(vision), HasSubstr("a Gemma 3 with its vision tower (Gemma3ForConditionalGeneration); oomb "
                                         "trains the text model, Gemma3ForCausalLM"));
  vision.erase("architectures");
  EXPECT_THAT(refusal(vision), HasSubstr("unsupported model_type 'gemma3'"));
}

// Written back (config_to_json) and read again: the windows by layer type, both thetas, the scalar and
// the activation (no hidden_act); transformers 5's rope_parameters per layer type read and written so;
// a Llama made Gemma 3 (set_arch) takes Gemma3TextConfig's parts, and back again none.
TEST(Gemma3, WrittenBackReadsTheSame) {
  json j = gemma3_1b();
  j["num_hidden_layers"] = 7;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const ModelConfig c = parse_config(j, "gemma3.json");
  const json out = config_to_json(c);
  EXPECT_FALSE(out.contains("hidden_act"));
  EXPECT_EQ(out["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_EQ(out["sliding_window"], 512);
  EXPECT_EQ(out["layer_types"].size(), 7u);
  EXPECT_EQ(out["layer_types"][5], "full_attention");
  EXPECT_EQ(out["rope_local_base_freq"], 10000.0);
  EXPECT_EQ(out["sliding_window_pattern"], 6);  // (what transformers 4.50 to 4.52 read, layer_types unknown to them)
  const ModelConfig back = parse_config(out, "written.json");
  EXPECT_EQ(back.layer_window, c.layer_window);
  EXPECT_EQ(back.rope.type, "linear");
  EXPECT_EQ(back.rope.factor, 8.0);
  EXPECT_EQ(back.sliding_rope_theta, 10000.0);
  EXPECT_EQ(back.query_pre_attn_scalar, 256);
  // the full layers' table is linear's, the sliding ones' rope_local_base_freq's own
  float att = 0;
  const std::vector<float> scaled = rope_inv_freq(c, &att), plain = rope_inv_freq_plain(c);
  ASSERT_EQ(plain.size(), 128u);
  EXPECT_NEAR(plain[1], std::pow(10000.0, -2.0 / 256.0), 1e-7);
  EXPECT_NEAR(scaled[1], std::pow(1e6, -2.0 / 256.0) / 8.0, 1e-7);

  json t5 = tiny_config_json("gemma3_text", 2);
  t5["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"rope_theta", 1e6}, {"factor", 8.0}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  const ModelConfig p = parse_config(t5, "t5.json");
  EXPECT_EQ(p.rope.type, "linear");
  EXPECT_EQ(p.sliding_rope_theta, 10000.0);
  const json pout = config_to_json(p);
  EXPECT_EQ(pout["rope_parameters"]["sliding_attention"], json({{"rope_type", "default"}, {"rope_theta", 10000.0}}));
  EXPECT_EQ(parse_config(pout, "t5_written.json").rope.factor, 8.0);
  json bad = t5;
  bad["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  EXPECT_THAT(refusal(bad), HasSubstr("Gemma3ForCausalLM's sliding layers take the plain RoPE"));

  ModelConfig m = parse_config(tiny_config_json("llama", 2), "llama.json");
  set_arch(m, Arch::Gemma3);
  EXPECT_TRUE(m.qk_norm && m.pre_norm() && m.post_norm());
  EXPECT_EQ(m.query_pre_attn_scalar, 256);
  EXPECT_EQ(m.sliding_rope_theta, 10000.0);
  EXPECT_EQ(m.layer_window, (std::vector<int64_t>{4096, 4096}));
  EXPECT_EQ(parse_config(config_to_json(m), "m.json").arch, Arch::Gemma3);
  set_arch(m, Arch::Llama);
  EXPECT_FALSE(m.qk_norm || m.post_norm());
  EXPECT_EQ(m.query_pre_attn_scalar, 0);
  EXPECT_EQ(m.sliding_rope_theta, 0);
  EXPECT_EQ(attention_scale(m), float(1.0 / std::sqrt(8.0)));
}

json tiny_gemma() {
  json j = tiny_config_json("gemma3_text", 2);
  j["num_hidden_layers"] = 3, j["sliding_window"] = 5, j["sliding_window_pattern"] = 3;
  j["query_pre_attn_scalar"] = 20, j["rope_local_base_freq"] = 100.0;
  return j;
}

// --keep-attention runs the sandwich norms as the recompute does: the same bits, in fp32 and bf16, in
// both sweep orders.
TEST(Gemma3, KeepingAttentionGivesTheRecomputedBits) { expect_kept_attention_bits(tiny_gemma(), 6); }

// --precision bf16 on a Gemma 3: within bf16's reach of the fp32 step, and rounded.
TEST(Gemma3, Bf16StepTracksTheF32Step) { expect_bf16_tracks_f32(tiny_gemma(), 8, "gemma3"); }

// oomb init from the preset (norms 0: Gemma scales by 1 + w), then oomb train: the loss falls, and the
// saved checkpoint has Gemma 3's tensors by transformers' names and its config.json the same family.
TEST(Gemma3, CliInitsTrainsAndSavesAGemma3) {
  const auto dir = temp_dir();
  const fs::path m = dir / "m", out = dir / "out";
  CmdResult r = oomb_cmd(dir, fmt::format("init --preset gemma3-1b --layers 6 --hidden 64 --intermediate 96 "
                                          "--heads 4 --kv-heads 2 --head-dim 32 --vocab 300 --out {}", m.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  const json cfg = json::parse(read_text(m / "config.json"));
  const json s = "sliding_attention", f = "full_attention";
  EXPECT_EQ(cfg["layer_types"], json({s, s, s, s, s, f}));
  EXPECT_EQ(cfg["sliding_window_pattern"], 6);
  EXPECT_EQ(cfg["sliding_window"], 512);
  EXPECT_EQ(cfg["head_dim"], 32);
  const SafetensorsModel init = SafetensorsModel::open(m);
  const auto norm = init.get("model.layers.2.pre_feedforward_layernorm.weight");
  EXPECT_EQ(norm.shape, std::vector<int64_t>{64});
  std::vector<float> values(64, 1.0f);
  init.read_f32("model.layers.2.pre_feedforward_layernorm.weight", values.data());
  EXPECT_EQ(values, std::vector<float>(64, 0.0f));
  // a head size apart from hidden / heads stays the preset's unless --hidden or --heads is given (Gemma's
  // 256, Qwen3's 128; tiny-qwen3's 32 over hidden 64 / 4 heads)
  r = oomb_cmd(dir, fmt::format("init --preset tiny-qwen3 --layers 1 --out {}", (dir / "q3").string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(read_text(dir / "q3" / "config.json"))["head_dim"], 32);
  expect_cli_trains(dir, m, out);
  EXPECT_EQ(json::parse(read_text(out / "config.json"))["model_type"], "gemma3_text");
  const SafetensorsModel saved = SafetensorsModel::open(out);
  const std::vector<std::string> names = saved.names();
  for (const char* n : {"model.layers.1.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
                        "model.layers.1.pre_feedforward_layernorm.weight",
                        "model.layers.1.post_feedforward_layernorm.weight", "model.layers.1.self_attn.q_norm.weight"})
    EXPECT_TRUE(std::count(names.begin(), names.end(), n)) << n;
  EXPECT_EQ(saved.get("model.layers.1.self_attn.k_norm.weight").shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(saved.get("model.layers.5.self_attn.q_proj.weight").shape, (std::vector<int64_t>{4 * 32, 64}));
}

}  // namespace
