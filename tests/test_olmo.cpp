// OLMo 2 (Olmo2ForCausalLM, hf/config.h): each layer normalizes its branches' outputs rather than their
// inputs (post_attention_layernorm, post_feedforward_layernorm), and its q and k norms take the whole
// projection. OLMo 3 (Olmo3ForCausalLM): OLMo 2 with sliding windows on three layers of four, whose
// RoPE is the plain one of rope_theta (the full layers' takes the configured scaling). (Against the
// float64 oracle: Oracle.Olmo2PostNorms and Oracle.Olmo3SlidingLayersAndTheirRope.) Its config.json read with Olmo2Config's defaults (rms_norm_eps 1e-5, pad 1, eos 50279,
// attention_bias over q/k/v/o, no MLP bias), refused where the engine cannot follow it, written back
// the same; the parameters as transformers names and shapes them; the preset's count; oomb init and a
// CLI run that trains and saves one. (Its loss and gradients against the float64 oracle:
// Oracle.Olmo2PostNorms; generation, --sweep layer, --offload params and the CUDA step (simt): those
// suites' OLMo 2 cases; transformers' own OLMo 2: pending until a GPU session commits its fixture.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <fstream>
#include <functional>
#include <fmt/format.h>

#include "hf/config.h"
#include "hf/safetensors.h"
#include "model/init.h"
#include "model/memory_plan.h"
#include "model/params.h"
#include "model/rope.h"
#include "model_fixture.h"
#include "train/model.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// OLMo-2-1124-7B's config.json (its shape, RoPE and tokens)
json olmo2_7b() {
  return {{"architectures", {"Olmo2ForCausalLM"}}, {"attention_bias", false}, {"attention_dropout", 0.0},
          {"eos_token_id", 100257}, {"hidden_act", "silu"}, {"hidden_size", 4096}, {"initializer_range", 0.02},
          {"intermediate_size", 11008}, {"max_position_embeddings", 4096}, {"model_type", "olmo2"},
          {"num_attention_heads", 32}, {"num_hidden_layers", 32}, {"num_key_value_heads", 32},
          {"pad_token_id", 100277}, {"rms_norm_eps", 1e-06}, {"rope_scaling", nullptr}, {"rope_theta", 500000},
          {"tie_word_embeddings", false}, {"torch_dtype", "float32"}, {"use_cache", true}, {"vocab_size", 100352}};
}

std::string refusal(const json& j) {
  return error_of([&] { parse_config(j, "olmo2.json"); });
}

TEST(Olmo2, ReadsItsConfig) {
  const ModelConfig c = parse_config(olmo2_7b(), "olmo2.json");
  EXPECT_EQ(c.arch, Arch::Olmo2);
  EXPECT_TRUE(c.post_norm());
  EXPECT_TRUE(c.qk_norm && c.qk_norm_full());
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.pad_token_id, 100277);
  EXPECT_EQ(c.eos_token_id, 100257);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.layer_window, std::vector<int64_t>(32, 0));
  // transformers' names and shapes: no norm before attention, the q/k norms as wide as q and k
  const std::string l = "model.layers.7.";
  EXPECT_TRUE(param_shape(c, l + "input_layernorm.weight").empty());
  EXPECT_EQ(param_shape(c, l + "post_attention_layernorm.weight"), std::vector<int64_t>{4096});
  EXPECT_EQ(param_shape(c, l + "post_feedforward_layernorm.weight"), std::vector<int64_t>{4096});
  EXPECT_EQ(param_shape(c, l + "self_attn.q_norm.weight"), std::vector<int64_t>{32 * 128});
  EXPECT_EQ(param_shape(c, l + "self_attn.k_norm.weight"), std::vector<int64_t>{32 * 128});
  // the preset is this model: its parameters counted here from the shapes (untied)
  const int64_t d = 4096, I = 11008, layer = 4 * d * d + 3 * I * d + 2 * d + 2 * d;
  EXPECT_EQ(param_count(c), 2 * 100352 * d + 32 * layer + d);
  const ModelConfig p = preset_config("olmo2-7b");
  EXPECT_EQ(param_count(p), param_count(c));
  EXPECT_EQ(param_layout(p).size(), param_layout(c).size());
  EXPECT_EQ(p.pad_token_id, c.pad_token_id);
}

// Olmo2Config's defaults where the file says nothing: rms_norm_eps 1e-5, pad 1, eos 50279, no bos,
// 2048 positions; attention_bias puts biases on q, k, v and o (OlmoAttention), and a file's mlp_bias
// adds none (OlmoMLP has no bias).
TEST(Olmo2, DefaultsAreOlmo2Configs) {
  json j = tiny_config_json("olmo2", 2);
  for (const char* k : {"rms_norm_eps", "max_position_embeddings", "rope_theta"}) j.erase(k);
  const ModelConfig c = parse_config(j, "olmo2.json");
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.pad_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 50279);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rope.theta, 10000.0);
  j["attention_bias"] = true, j["mlp_bias"] = true;
  const ModelConfig b = parse_config(j, "b.json");
  EXPECT_TRUE(b.qkv_bias && b.o_bias);
  EXPECT_FALSE(b.mlp_bias);
  EXPECT_FALSE(param_shape(b, "model.layers.0.self_attn.o_proj.bias").empty());
  EXPECT_TRUE(param_shape(b, "model.layers.0.mlp.down_proj.bias").empty());
}

TEST(Olmo2, RefusedWhereItCannotBeFollowed) {
  json j = tiny_config_json("olmo2", 2);
  j["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_THAT(refusal(j), HasSubstr("layer_types asks for sliding_attention, but no sliding window is set (OLMo 2 "
                                    "has none; OLMo 3 has)"));
  json pad = tiny_config_json("olmo2", 2);
  pad["vocab_size"] = 1;
  pad.erase("pad_token_id");
  EXPECT_THAT(refusal(pad), HasSubstr("no 'pad_token_id', and Olmo2ForCausalLM's default 1 is outside the vocabulary"));
  json act = tiny_config_json("olmo2", 2);
  act["hidden_act"] = "gelu";
  EXPECT_THAT(refusal(act), HasSubstr("hidden_act 'gelu' is not supported"));
}

// Written back (config_to_json) and read again: attention_bias as given, no mlp_bias written; a Llama
// made OLMo 2 (set_arch) takes its q/k norms, and back again none.
TEST(Olmo2, WrittenBackReadsTheSame) {
  json j = tiny_config_json("olmo2", 2);
  j["attention_bias"] = true;
  const ModelConfig c = parse_config(j, "olmo2.json");
  const json out = config_to_json(c);
  EXPECT_EQ(out["attention_bias"], true);
  EXPECT_FALSE(out.contains("mlp_bias"));
  EXPECT_EQ(out["architectures"], json::array({"Olmo2ForCausalLM"}));
  const ModelConfig back = parse_config(out, "written.json");
  EXPECT_EQ(back.arch, Arch::Olmo2);
  EXPECT_TRUE(back.qkv_bias && back.o_bias && !back.mlp_bias && back.qk_norm);
  EXPECT_EQ(back.pad_token_id, c.pad_token_id);
  EXPECT_EQ(back.rms_norm_eps, c.rms_norm_eps);
  ModelConfig m = parse_config(tiny_config_json("llama", 2), "llama.json");
  set_arch(m, Arch::Olmo2);
  EXPECT_TRUE(m.qk_norm && m.post_norm());
  EXPECT_EQ(parse_config(config_to_json(m), "m.json").arch, Arch::Olmo2);
  set_arch(m, Arch::Llama);
  EXPECT_FALSE(m.qk_norm || m.post_norm());
  ModelConfig biased = c;
  biased.mlp_bias = true;
  EXPECT_THAT(error_of([&] { config_to_json(biased); }), HasSubstr("Olmo2ForCausalLM has no MLP bias"));
}

// --keep-attention (the forward sweep keeps each layer's attention output; the backward's recompute
// takes it rather than attending again, and the recompute sweep below the top layer makes only the
// layer's output from it) runs the post-norms as the recompute does: the same bits, in fp32 and under
// --precision bf16 (whose matmuls read the residual stream's bf16 copies), in both sweep orders.
TEST(Olmo2, KeepingAttentionGivesTheRecomputedBits) { expect_kept_attention_bits(tiny_config_json("olmo2", 2), 6); }

// --precision bf16 on an OLMo 2: within bf16's reach of the fp32 step (the loss 1e-2, the whole gradient
// 3e-2), and rounded (more than 1e-4 apart). A bf16 path whose attention or MLP read something other
// than the residual stream (the norm's output, as the other families' do) would be a different model,
// tens of percent away.
TEST(Olmo2, Bf16StepTracksTheF32Step) { expect_bf16_tracks_f32(tiny_config_json("olmo2", 2), 8, "olmo2"); }

// Olmo3Config's windows: 4096 on three layers of four unless layer_types or sliding_window say otherwise
// (a null window with sliding layers refused); the sliding layers take the plain RoPE, the full ones
// the configured YaRN; written back with its window and every layer's type.
TEST(Olmo3, WindowsRopeAndRoundTrip) {
  json j = tiny_config_json("olmo3", 2);
  j["num_hidden_layers"] = 8;
  ModelConfig c = parse_config(j, "olmo3.json");
  EXPECT_EQ(c.arch, Arch::Olmo3);
  EXPECT_TRUE(c.post_norm() && c.qk_norm_full() && c.qk_norm);
  EXPECT_EQ(c.layer_window, (std::vector<int64_t>{4096, 4096, 4096, 0, 4096, 4096, 4096, 0}));
  EXPECT_EQ(c.rms_norm_eps, 1e-6);  // (the fixture's; Olmo3Config's is OLMo 2's 1e-5)
  for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(c.rope_scaled(l), l % 4 == 3) << l;
  EXPECT_TRUE(param_shape(c, "model.layers.0.input_layernorm.weight").empty());
  EXPECT_EQ(param_shape(c, "model.layers.0.self_attn.q_norm.weight"), std::vector<int64_t>{4 * 8});
  json k = j;
  k["sliding_window"] = 7;
  k["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention", "full_attention",
                      "full_attention", "full_attention", "sliding_attention"};
  c = parse_config(k, "k.json");
  EXPECT_EQ(c.layer_window, (std::vector<int64_t>{0, 7, 0, 0, 0, 0, 0, 7}));
  const json out = config_to_json(c);
  EXPECT_EQ(out["sliding_window"], 7);
  EXPECT_EQ(out["layer_types"], k["layer_types"]);
  EXPECT_EQ(parse_config(out, "written.json").layer_window, c.layer_window);
  // the plain table is rope_theta's own; the full layers' is YaRN's
  k["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  c = parse_config(k, "yarn.json");
  float scaled_att = 0;
  const std::vector<float> scaled = rope_inv_freq(c, &scaled_att), plain = rope_inv_freq_plain(c);
  ASSERT_EQ(plain.size(), 4u);  // (head_dim 8)
  for (size_t i = 0; i < plain.size(); ++i)  // theta^(-2i/D), as rounded to float32
    EXPECT_NEAR(plain[i], std::pow(10000.0, -double(2 * i) / 8.0), 1e-6 * plain[i]) << i;
  EXPECT_NE(plain, scaled);
  EXPECT_GT(scaled_att, 1.0f);
  EXPECT_EQ(workspace_shape(c, ChunkPlan{16, 8}).rope_tables, 2);
  json all_sliding = k;  // (one table: the plain one alone)
  all_sliding["num_hidden_layers"] = 2, all_sliding.erase("layer_types");
  EXPECT_EQ(workspace_shape(parse_config(all_sliding, "s.json"), ChunkPlan{16, 8}).rope_tables, 1);
  EXPECT_EQ(workspace_shape(parse_config(tiny_config_json("olmo2", 2), "o2.json"), ChunkPlan{16, 8}).rope_tables, 1);
  json null_window = j;
  null_window["sliding_window"] = nullptr;
  EXPECT_THAT(refusal(null_window), HasSubstr("Olmo3ForCausalLM's sliding_window is null, but its config's layer_types "
                                              "(absent here) slide three layers of every four"));
  null_window["layer_types"] = k["layer_types"];
  EXPECT_THAT(refusal(null_window), HasSubstr("layer_types asks for sliding_attention, but no sliding window is set "
                                              "(its sliding_window is null)"));
}

// oomb init: another family's preset made OLMo 3, and then with other --layers, takes Olmo3Config's
// windows (4096 on three layers of four), one per layer, in the config.json written.
TEST(Olmo3, InitGivesEveryShapeItsWindows) {
  const auto dir = temp_dir();
  auto types_of = [&](const std::string& args) {
    const std::string out = (dir / std::to_string(std::hash<std::string>{}(args))).string();
    const CmdResult r = oomb_cmd(dir, "init --out " + out + " " + args);
    EXPECT_EQ(r.code, 0) << r.out;
    const json j = json::parse(read_text(fs::path(out) / "config.json"));
    EXPECT_EQ(j["sliding_window"], 4096) << args;
    return j["layer_types"];
  };
  const json s = "sliding_attention", f = "full_attention";
  EXPECT_EQ(types_of("--preset tiny --arch olmo3"), json({s, s}));
  // (Phi-3's window on every layer is not OLMo 3's)
  EXPECT_EQ(types_of("--preset phi-3-mini-4k --arch olmo3 --layers 4 --hidden 64 --heads 4 --kv-heads 4 --vocab 300"),
            json({s, s, s, f}));
  EXPECT_EQ(types_of("--preset olmo2-7b --arch olmo3 --layers 5 --hidden 64 --heads 4 --kv-heads 2 --vocab 300"),
            json({s, s, s, f, s}));
}

// transformers 5's form: rope_parameters per layer type, the full layers' YaRN and the sliding layers' own
// theta, read, written back the same way and read again; a sliding layers' RoPE that is not plain, or a
// third layer type, refused; Olmo3Config's theta (5e5) where the file gives none.
TEST(Olmo3, RopeParametersPerLayerType) {
  json j = tiny_config_json("olmo3", 2);
  j.erase("rope_theta");
  EXPECT_EQ(parse_config(j, "no_theta.json").rope.theta, 5e5);
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 2.0},
                                              {"original_max_position_embeddings", 16}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  const ModelConfig c = parse_config(j, "per_type.json");
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.sliding_rope_theta, 10000.0);
  EXPECT_NEAR(rope_inv_freq_plain(c)[1], std::pow(10000.0, -2.0 / 8.0), 1e-6);
  const json out = config_to_json(c);
  EXPECT_EQ(out["rope_parameters"]["sliding_attention"], json({{"rope_type", "default"}, {"rope_theta", 10000.0}}));
  EXPECT_EQ(out["rope_parameters"]["full_attention"]["rope_type"], "yarn");
  const ModelConfig back = parse_config(out, "written.json");
  EXPECT_EQ(back.sliding_rope_theta, 10000.0);
  EXPECT_EQ(back.rope.theta, 1e6);
  EXPECT_EQ(back.rope.factor, 2.0);
  json bad = j;
  bad["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  EXPECT_THAT(refusal(bad), HasSubstr("rope_parameters.sliding_attention.rope_type = 'linear': Olmo3ForCausalLM's "
                                      "sliding layers take the plain RoPE"));
  bad = j;
  bad["rope_parameters"]["chunked_attention"] = json::object();
  EXPECT_THAT(refusal(bad), HasSubstr("rope_parameters per layer type has 'chunked_attention'"));
}

// oomb init from the preset, then oomb train: the loss falls, and the saved checkpoint has OLMo 2's
// tensors by transformers' names and its config.json the same family.
TEST(Olmo2, CliInitsTrainsAndSavesAnOlmo2) {
  const auto dir = temp_dir();
  const fs::path m = dir / "m", out = dir / "out";
  CmdResult r = oomb_cmd(dir, fmt::format("init --preset olmo2-7b --layers 2 --hidden 64 --intermediate 96 "
                                          "--heads 4 --kv-heads 2 --vocab 300 --out {}", m.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  expect_cli_trains(dir, m, out);
  EXPECT_EQ(json::parse(read_text(out / "config.json"))["model_type"], "olmo2");
  const SafetensorsModel saved = SafetensorsModel::open(out);
  const std::vector<std::string> names = saved.names();
  for (const char* n : {"model.layers.1.post_feedforward_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
                        "model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"})
    EXPECT_TRUE(std::count(names.begin(), names.end(), n)) << n;
  EXPECT_EQ(saved.get("model.layers.1.self_attn.k_norm.weight").shape, (std::vector<int64_t>{2 * 16}));
  EXPECT_FALSE(std::count(names.begin(), names.end(), "model.layers.0.input_layernorm.weight"));
}

}  // namespace
