// GLM (GlmForCausalLM, model_type glm: glm-4-9b-chat-hf and its 1M-context sibling) and GLM-4
// (Glm4ForCausalLM, model_type glm4: GLM-4-0414; hf/config.h). GLM turns interleaved pairs (2i, 2i + 1) of
// the first half of each head (partial_rotary_factor 0.5, GlmConfig's default), has q/k/v biases
// (attention_bias, true by default) and none on o_proj, and its files fuse gate and up into
// mlp.gate_up_proj; GLM-4 adds a norm after each branch (post_self_attn_layernorm, post_mlp_layernorm; its
// post_attention_layernorm is the MLP's input's). Here: their config.json read with GlmConfig's defaults,
// refused where the engine cannot follow it, written back the same; the parameters as transformers names
// and shapes them; LoRA's modules on the fused linear; the presets' counts; the bits of --keep-attention;
// bf16 against fp32; oomb init and a CLI run that trains and saves each. (Their loss and gradients against
// the float64 oracle: Oracle.GlmInterleavedPartialRopeAndGlm4Norms; the interleaved RoPE op: CpuOps'
// RopeForwardBackward, CudaOps' EmbeddingRmsnormRopeSwiglu; transformers' own: pending until a GPU session
// commits its fixture.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fmt/format.h>

#include "hf/adapter_config.h"
#include "hf/config.h"
#include "hf/fused_projections.h"
#include "hf/peft.h"
#include "hf/safetensors.h"
#include "model/init.h"
#include "model/lora.h"
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

// a config.json of glm-4-9b-chat-hf's shape (GlmConfig's values, written out as transformers 4.46 writes them)
json glm_9b() {
  return {{"architectures", {"GlmForCausalLM"}}, {"attention_bias", true}, {"attention_dropout", 0.0},
          {"eos_token_id", {151329, 151336, 151338}}, {"head_dim", 128}, {"hidden_act", "silu"},
          {"hidden_size", 4096}, {"initializer_range", 0.02}, {"intermediate_size", 13696},
          {"max_position_embeddings", 131072}, {"model_type", "glm"}, {"num_attention_heads", 32},
          {"num_hidden_layers", 40}, {"num_key_value_heads", 2}, {"pad_token_id", 151329},
          {"partial_rotary_factor", 0.5}, {"rms_norm_eps", 1.5625e-07}, {"rope_theta", 10000.0},
          {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"}, {"use_cache", true}, {"vocab_size", 151552}};
}

json glm4_9b() {
  json j = glm_9b();
  j["architectures"] = {"Glm4ForCausalLM"}, j["model_type"] = "glm4";
  return j;
}

json with_eos(json j, const json& eos) {
  j["eos_token_id"] = eos;
  return j;
}

std::string refusal(const json& j) {
  return error_of([&] { parse_config(j, "glm.json"); });
}

TEST(Glm, ReadsItsConfig) {
  const ModelConfig c = parse_config(glm_9b(), "glm.json");
  EXPECT_EQ(c.arch, Arch::Glm);
  EXPECT_TRUE(c.rope_interleaved());
  EXPECT_EQ(c.rope.partial_rotary_factor, 0.5);
  EXPECT_EQ(rope_dim(c), 64);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias || c.mlp_bias || c.qk_norm);
  EXPECT_TRUE(c.pre_norm());
  EXPECT_FALSE(c.post_norm());
  EXPECT_TRUE(c.fused_gate_up());
  EXPECT_FALSE(c.fused_qkv());
  EXPECT_EQ(c.norm_offset(), 0.0f);
  EXPECT_EQ(c.mlp_act(), Act::Silu);
  EXPECT_EQ(c.eos_token_id, 151329);
  EXPECT_EQ(c.pad_token_id, 151329);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.rms_norm_eps, 1.5625e-7);
  EXPECT_EQ(attention_scale(c), float(1.0 / std::sqrt(128.0)));
  // inv_freq over the 64 dims turned: theta^(-2i/64)
  float att = 0;
  const std::vector<float> inv = rope_inv_freq(c, &att);
  ASSERT_EQ(inv.size(), 32u);
  EXPECT_NEAR(inv[1], std::pow(10000.0, -2.0 / 64.0), 1e-7);
  // transformers' names and shapes: q/k/v with biases, o without; gate and up from the fused linear's rows
  const std::string l = "model.layers.3.";
  EXPECT_EQ(param_shape(c, l + "self_attn.q_proj.bias"), std::vector<int64_t>{4096});
  EXPECT_EQ(param_shape(c, l + "self_attn.k_proj.bias"), std::vector<int64_t>{256});
  EXPECT_TRUE(param_shape(c, l + "self_attn.o_proj.bias").empty());
  EXPECT_TRUE(param_shape(c, l + "post_self_attn_layernorm.weight").empty());
  const auto up = fused_part(c, l + "mlp.up_proj.weight");
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->fused, l + "mlp.gate_up_proj.weight");
  EXPECT_EQ(up->row0, 13696);
  EXPECT_EQ(up->fused_rows, 2 * 13696);
  EXPECT_FALSE(fused_part(c, l + "self_attn.q_proj.weight").has_value());
  // the preset is this model: its parameters counted here from the shapes (untied)
  const int64_t d = 4096, I = 13696, q = 4096, kv = 256, V = 151552;
  const int64_t layer = d * q + q + 2 * (d * kv + kv) + q * d + 3 * I * d + 2 * d;
  EXPECT_EQ(param_count(c), 2 * V * d + 40 * layer + d);
  const ModelConfig p = preset_config("glm-4-9b");
  EXPECT_EQ(param_count(p), param_count(c));
  EXPECT_EQ(rope_dim(p), 64);
  EXPECT_EQ(p.pad_token_id, 151329);
}

// GLM-4: GLM with four norms a layer, by its own names, plain (w, not 1 + w), and no q/k norms.
TEST(Glm, Glm4HasANormAfterEachBranch) {
  const ModelConfig c = parse_config(glm4_9b(), "glm4.json");
  EXPECT_EQ(c.arch, Arch::Glm4);
  EXPECT_TRUE(c.pre_norm() && c.post_norm());
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.norm_offset(), 0.0f);
  EXPECT_TRUE(c.rope_interleaved() && c.fused_gate_up() && c.qkv_bias);
  const std::string l = "model.layers.7.";
  for (const char* n : {"input_layernorm.weight", "post_self_attn_layernorm.weight", "post_attention_layernorm.weight",
                        "post_mlp_layernorm.weight"})
    EXPECT_EQ(param_shape(c, l + n), std::vector<int64_t>{4096}) << n;
  EXPECT_TRUE(param_shape(c, l + "pre_feedforward_layernorm.weight").empty());
  EXPECT_TRUE(param_shape(c, l + "self_attn.q_norm.weight").empty());
  EXPECT_EQ(param_count(c), param_count(parse_config(glm_9b(), "glm.json")) + 40 * 2 * 4096);
  EXPECT_EQ(param_count(preset_config("glm4-9b")), param_count(c));
}

// GlmConfig's defaults where the file says nothing: partial_rotary_factor 0.5, attention_bias true, head_dim
// 128 (not hidden / heads), 2 KV heads (not the head count), rms_norm_eps 1.5625e-7, 131072 positions, eos
// [151329, 151336, 151338] (generation stops at each; written back whole), pad 151329 (refused where the
// vocabulary is smaller, as transformers' embedding would), untied.
TEST(Glm, DefaultsAreGlmConfigs) {
  json j = glm_9b();
  for (const char* k : {"partial_rotary_factor", "attention_bias", "head_dim", "rms_norm_eps", "num_key_value_heads",
                        "max_position_embeddings", "eos_token_id", "pad_token_id", "tie_word_embeddings"})
    j.erase(k);
  j["hidden_size"] = 2048;  // (hidden / heads 64: the default head_dim is not it)
  const ModelConfig c = parse_config(j, "glm.json");
  EXPECT_EQ(c.rope.partial_rotary_factor, 0.5);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rms_norm_eps, 1.5625e-7);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.eos_token_id, 151329);
  const std::vector<int64_t> eos = {151329, 151336, 151338};
  EXPECT_EQ(eos_token_ids(c), eos);
  EXPECT_EQ(config_to_json(c)["eos_token_id"], json(eos));
  EXPECT_EQ(eos_token_ids(parse_config(glm_9b(), "listed.json")), eos);  // (the file's list)
  EXPECT_EQ(eos_token_ids(parse_config(with_eos(j, 151336), "one.json")), std::vector<int64_t>{151336});
  EXPECT_EQ(c.pad_token_id, 151329);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(parse_config(with_eos(tiny_config_json("llama", 2), json{5, 9}), "l.json").eos_token_id, 5);
  EXPECT_EQ(eos_token_ids(parse_config(with_eos(tiny_config_json("llama", 2), json{5, 9}), "l.json")),
            (std::vector<int64_t>{5, 9}));
  EXPECT_EQ(eos_token_ids(parse_config(tiny_config_json("llama", 2), "absent.json")), std::vector<int64_t>{2});  // (LlamaConfig's)
  EXPECT_TRUE(eos_token_ids(parse_config(with_eos(tiny_config_json("llama", 2), nullptr), "null.json")).empty());
  json small = tiny_config_json("glm", 2);
  small.erase("pad_token_id");
  EXPECT_THAT(refusal(small), HasSubstr("no 'pad_token_id', and GlmForCausalLM's default 151329 is outside the "
                                        "vocabulary"));
  // transformers 5's form: the factor in rope_parameters
  json t5 = tiny_config_json("glm4", 2);
  t5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500.0}, {"partial_rotary_factor", 0.75}};
  t5["head_dim"] = 16;
  const ModelConfig p = parse_config(t5, "t5.json");
  EXPECT_EQ(p.rope.partial_rotary_factor, 0.75);
  EXPECT_EQ(rope_dim(p), 12);
  EXPECT_EQ(p.rope.theta, 500.0);
}

TEST(Glm, RefusedWhereItCannotBeFollowed) {
  const json j = tiny_config_json("glm", 2);
  auto with = [&](const char* k, const json& v) {
    json m = j;
    m[k] = v;
    return refusal(m);
  };
  EXPECT_THAT(with("hidden_act", "gelu"), HasSubstr("hidden_act 'gelu' is not supported (only silu)"));
  EXPECT_THAT(with("partial_rotary_factor", 0.1), HasSubstr("turns int(8 * 0.1) = 0 dims of each head"));
  EXPECT_THAT(with("partial_rotary_factor", 1.5), HasSubstr("'partial_rotary_factor' must be in (0, 1]"));
  json llama = tiny_config_json("llama", 2);
  llama["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(refusal(llama), HasSubstr("Phi3ForCausalLM's and GlmForCausalLM's do"));
  json both = j;
  both["architectures"] = {"Glm4ForCausalLM"};
  EXPECT_THAT(refusal(both), HasSubstr("architectures[0] 'Glm4ForCausalLM' does not match model_type 'glm'"));
}

// Written back (config_to_json) and read again: the factor (written even at GLM's default), the biases; a
// Llama made GLM (set_arch) takes GlmConfig's factor and biases, and back again whole heads and none.
TEST(Glm, WrittenBackReadsTheSame) {
  for (const json& j : {glm_9b(), glm4_9b()}) {
    const ModelConfig c = parse_config(j, "glm.json");
    const json out = config_to_json(c);
    EXPECT_EQ(out["partial_rotary_factor"], 0.5);
    EXPECT_EQ(out["attention_bias"], true);
    EXPECT_FALSE(out.contains("mlp_bias"));
    const ModelConfig back = parse_config(out, "written.json");
    EXPECT_EQ(back.arch, c.arch);
    EXPECT_EQ(back.rope.partial_rotary_factor, 0.5);
    EXPECT_EQ(back.qkv_bias, true);
    EXPECT_EQ(param_count(back), param_count(c));
  }
  // a config made here (no file behind it): the factor 1 and no biases written, absent being 0.5 and true
  json whole = tiny_config_json("glm", 2);
  whole["partial_rotary_factor"] = 1.0, whole["attention_bias"] = false;
  ModelConfig made = parse_config(whole, "w.json");
  made.raw = json::object();
  const json out = config_to_json(made);
  EXPECT_EQ(out["partial_rotary_factor"], 1.0);
  EXPECT_EQ(out["attention_bias"], false);
  const ModelConfig back = parse_config(out, "w2.json");
  EXPECT_EQ(back.rope.partial_rotary_factor, 1.0);
  EXPECT_FALSE(back.qkv_bias);

  ModelConfig m = parse_config(tiny_config_json("llama", 2), "llama.json");
  set_arch(m, Arch::Glm);
  EXPECT_EQ(m.rope.partial_rotary_factor, 0.5);
  EXPECT_TRUE(m.qkv_bias && m.rope_interleaved());
  EXPECT_EQ(parse_config(config_to_json(m), "m.json").arch, Arch::Glm);
  m.rope.partial_rotary_factor = 0.75;
  set_arch(m, Arch::Glm4);  // (GLM to GLM-4: the factor kept)
  EXPECT_EQ(m.rope.partial_rotary_factor, 0.75);
  set_arch(m, Arch::Llama);
  EXPECT_EQ(m.rope.partial_rotary_factor, 1.0);
  EXPECT_FALSE(m.qkv_bias || m.rope_interleaved() || m.fused_projections());
}

// LoRA on a GLM: PEFT adapts its fused gate_up_proj as one module (B: gate's and up's rows), q, k and v as
// their own; gate without up is refused naming the fused linear; target_modules names it once; GLM-4's
// modules_to_save its four norms.
TEST(Glm, LoraAdaptsTheFusedGateUpAsOneModule) {
  const ModelConfig c = parse_config(tiny_config_json("glm", 2), "glm.json");
  LoraConfig l;
  l.rank = 2;
  parse_lora_targets("all", l);
  std::vector<std::string> names;
  for (const ParamSpec& s : lora_layout(c, l)) names.push_back(s.name);
  const std::string p = "base_model.model.model.layers.1.";
  for (const char* n : {"self_attn.q_proj.lora_A.weight", "self_attn.k_proj.lora_B.weight", "mlp.gate_up_proj.lora_A.weight",
                        "mlp.down_proj.lora_B.weight"})
    EXPECT_TRUE(std::count(names.begin(), names.end(), p + n)) << n;
  EXPECT_FALSE(std::count(names.begin(), names.end(), p + "mlp.gate_proj.lora_A.weight"));
  EXPECT_EQ(lora_shape(c, l, kUp, true), (std::vector<int64_t>{2 * 48, 2}));
  EXPECT_EQ(lora_shape(c, l, kQ, true), (std::vector<int64_t>{4 * 8, 2}));
  const std::vector<std::string> modules = adapter_config_json(l, "m", {}, c.fused_qkv(), c.fused_gate_up())["target_modules"];
  EXPECT_EQ(modules, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"}));
  // LongLoRA's trainable norms on a GLM-4: PEFT's modules_to_save names its four layer norms
  const ModelConfig g4 = parse_config(tiny_config_json("glm4", 2), "glm4.json");
  l.train_embeddings_norms = true;
  const Params trainable(g4, lora_layout(g4, l), Tier::Host, Tag::IO);
  const auto dir = temp_dir("_adapter");
  write_adapter_files(dir, g4, l, trainable, "base");
  std::vector<std::string> saved = json::parse(read_text(dir / "adapter_config.json"))["modules_to_save"];
  std::sort(saved.begin(), saved.end());
  EXPECT_EQ(saved, (std::vector<std::string>{"embed_tokens", "input_layernorm", "norm", "post_attention_layernorm",
                                             "post_mlp_layernorm", "post_self_attn_layernorm"}));
  parse_lora_targets("q,gate", l);
  EXPECT_THAT(error_of([&] { lora_layout(c, l); }), HasSubstr("gate_proj and up_proj are one linear in its files "
                                                              "(model.layers.0.mlp.gate_up_proj.weight)"));
}

json tiny_glm4() {
  json j = tiny_config_json("glm4", 2);
  j["head_dim"] = 16;  // (RoPE on 8 of 16 dims, interleaved)
  return j;
}

// --keep-attention runs GLM-4's norms and interleaved RoPE as the recompute does: the same bits.
TEST(Glm, KeepingAttentionGivesTheRecomputedBits) { expect_kept_attention_bits(tiny_glm4(), 6); }

// --precision bf16 on a GLM-4: within bf16's reach of the fp32 step, and rounded.
TEST(Glm, Bf16StepTracksTheF32Step) { expect_bf16_tracks_f32(tiny_glm4(), 8, "glm4"); }

// oomb init from each preset, then oomb train: the loss falls, and the saved checkpoint has the family's
// tensors by transformers' names (gate and up fused again, GLM-4's four norms) and its config.json the same
// family and factor.
TEST(Glm, CliInitsTrainsAndSavesGlmAndGlm4) {
  for (const std::string preset : {"glm-4-9b", "glm4-9b"}) {
    SCOPED_TRACE(preset);
    const auto dir = temp_dir("_" + preset);
    const fs::path m = dir / "m", out = dir / "out";
    const CmdResult r = oomb_cmd(dir, fmt::format("init --preset {} --layers 2 --hidden 64 --intermediate 96 --heads 4 "
                                                  "--kv-heads 2 --head-dim 16 --vocab 300 --out {}", preset, m.string()));
    ASSERT_EQ(r.code, 0) << r.out;
    const json cfg = json::parse(read_text(m / "config.json"));
    EXPECT_EQ(cfg["partial_rotary_factor"], 0.5);
    EXPECT_EQ(cfg["head_dim"], 16);
    expect_cli_trains(dir, m, out);
    const json saved_cfg = json::parse(read_text(out / "config.json"));
    EXPECT_EQ(saved_cfg["model_type"], preset == "glm-4-9b" ? "glm" : "glm4");
    EXPECT_EQ(saved_cfg["partial_rotary_factor"], 0.5);
    const SafetensorsModel saved = SafetensorsModel::open(out);
    const std::vector<std::string> names = saved.names();
    EXPECT_EQ(saved.get("model.layers.1.mlp.gate_up_proj.weight").shape, (std::vector<int64_t>{2 * 96, 64}));
    EXPECT_EQ(saved.get("model.layers.1.self_attn.v_proj.bias").shape, (std::vector<int64_t>{2 * 16}));
    EXPECT_FALSE(std::count(names.begin(), names.end(), "model.layers.1.mlp.gate_proj.weight"));
    EXPECT_FALSE(std::count(names.begin(), names.end(), "model.layers.1.self_attn.o_proj.bias"));
    const bool four = preset != "glm-4-9b";
    for (const char* n : {"model.layers.1.post_self_attn_layernorm.weight", "model.layers.1.post_mlp_layernorm.weight"})
      EXPECT_EQ(std::count(names.begin(), names.end(), n), four ? 1 : 0) << n;
  }
}

}  // namespace
