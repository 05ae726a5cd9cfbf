// SmolLM3 (SmolLM3ForCausalLM, hf/config.h): Llama's math with NoPE layers, whose attention turns no
// q or k. Its config.json read with SmolLM3Config's defaults (a NoPE layer every
// no_rope_layer_interval, tied, rope_theta 2e6, pad 128004), its sliding window on the NoPE layers,
// refused where the engine cannot follow it, written back the same; the preset's parameters; a NoPE
// layer's keys in the cache are the projections themselves; oomb init gives any shape its NoPE layers.
// (Its loss and gradients against the float64 oracle: Oracle.SmolLM3NoPeLayers; generation, --sweep
// layer, --offload params and the CUDA step (simt): those suites' SmolLM3 cases; transformers' own
// SmolLM3, with its window on the NoPE layer: pending until a GPU session commits its fixture.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include <functional>

#include "hf/checkpoint.h"
#include "train/model.h"

#include "hf/config.h"
#include "model/init.h"
#include "model/params.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using json = nlohmann::json;

namespace {

// SmolLM3-3B's config.json (its shape and its NoPE pattern: every 4th layer)
json smollm3_3b() {
  json nope = json::array();
  for (int l = 0; l < 36; ++l) nope.push_back(int((l + 1) % 4 != 0));
  return {{"architectures", {"SmolLM3ForCausalLM"}}, {"model_type", "smollm3"}, {"attention_bias", false},
          {"attention_dropout", 0.0}, {"bos_token_id", 128000}, {"eos_token_id", 128012}, {"hidden_act", "silu"},
          {"hidden_size", 2048}, {"intermediate_size", 11008}, {"max_position_embeddings", 65536},
          {"max_window_layers", 28}, {"mlp_bias", false}, {"no_rope_layer_interval", 4}, {"no_rope_layers", nope},
          {"num_attention_heads", 16}, {"num_hidden_layers", 36}, {"num_key_value_heads", 4},
          {"pad_token_id", 128004}, {"rms_norm_eps", 1e-06}, {"rope_scaling", nullptr}, {"rope_theta", 5000000.0},
          {"sliding_window", nullptr}, {"tie_word_embeddings", true}, {"torch_dtype", "bfloat16"},
          {"use_cache", false}, {"use_sliding_window", false}, {"vocab_size", 128256}};
}

std::string refusal(const json& j) {
  return error_of([&] { parse_config(j, "smollm3.json"); });
}

TEST(SmolLM3, ReadsItsConfig) {
  const ModelConfig c = parse_config(smollm3_3b(), "smollm3.json");
  EXPECT_EQ(c.arch, Arch::SmolLM3);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope.theta, 5e6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.pad_token_id, 128004);
  EXPECT_EQ(c.layer_window, std::vector<int64_t>(36, 0));
  ASSERT_EQ(c.layer_rope.size(), 36u);
  for (int64_t l = 0; l < 36; ++l) EXPECT_EQ(c.rope_on(l), l % 4 != 3) << l;
  EXPECT_EQ(attention_scale(c), float(1.0 / std::sqrt(128.0)));
  // the preset is this model: its parameters counted here from the shapes (tied)
  const int64_t d = 2048, kv = 4 * 128, I = 11008, layer = 2 * d * d + 2 * kv * d + 3 * I * d + 2 * d;
  EXPECT_EQ(param_count(c), 128256 * d + 36 * layer + d);
  const ModelConfig p = preset_config("smollm3-3b");
  EXPECT_EQ(param_count(p), param_count(c));
  EXPECT_EQ(p.layer_rope, c.layer_rope);
}

// SmolLM3Config's defaults where the file says nothing: a NoPE layer every 4th (the interval's),
// tied (transformers 5's field default, 4.x's PretrainedConfig's), rope_theta 2e6, 32768 positions, bos 128000, eos 128001,
// pad 128004 (refused where past the vocabulary, as nn.Embedding would refuse it); the sliding window,
// when used, on the NoPE layers unless layer_types says otherwise.
TEST(SmolLM3, DefaultsAreSmolLM3Configs) {
  json j = tiny_config_json("smollm3", 2);
  j["num_hidden_layers"] = 8;
  for (const char* k : {"tie_word_embeddings", "rope_theta", "max_position_embeddings"}) j.erase(k);
  const ModelConfig c = parse_config(j, "smollm3.json");
  EXPECT_EQ(c.layer_rope, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.theta, 2e6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_id, 128001);
  json k = j;
  k["no_rope_layer_interval"] = 3;
  EXPECT_EQ(parse_config(k, "k.json").layer_rope,
            (std::vector<bool>{true, true, false, true, true, false, true, true}));
  k["use_sliding_window"] = true, k["sliding_window"] = 5;
  EXPECT_EQ(parse_config(k, "k.json").layer_window, (std::vector<int64_t>{0, 0, 5, 0, 0, 5, 0, 0}));
  k["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "full_attention", "full_attention",
                      "full_attention", "full_attention", "sliding_attention"};
  EXPECT_EQ(parse_config(k, "k.json").layer_window, (std::vector<int64_t>{5, 0, 0, 0, 0, 0, 0, 5}));
  json pad = j;
  pad.erase("pad_token_id");
  EXPECT_THAT(refusal(pad), HasSubstr("no 'pad_token_id', and SmolLM3ForCausalLM's default 128004 is outside the "
                                      "vocabulary"));
  // another family's file naming no_rope_layers turns every layer (transformers' Llama reads no such field)
  json llama = tiny_config_json("llama", 2);
  llama["no_rope_layers"] = {0, 0};
  EXPECT_TRUE(parse_config(llama, "llama.json").layer_rope.empty());
}

TEST(SmolLM3, RefusedWhereItCannotBeFollowed) {
  const json s = tiny_config_json("smollm3", 2);
  auto with = [&](const char* k, const json& v) {
    json j = s;
    j[k] = v;
    return j;
  };
  EXPECT_THAT(refusal(with("no_rope_layers", {1})),
              HasSubstr("field 'no_rope_layers' must be a list of at least 2 entries (1: RoPE, 0: none)"));
  EXPECT_THAT(refusal(with("no_rope_layers", {1, 2})), HasSubstr("no_rope_layers[1] = 2: 1 (RoPE) or 0 (none)"));
  EXPECT_THAT(refusal(with("no_rope_layers", {1, "0"})), HasSubstr("field 'no_rope_layers' must be an integer"));
  EXPECT_THAT(refusal(with("no_rope_layer_interval", 0)), HasSubstr("field 'no_rope_layer_interval' must be positive"));
  EXPECT_THAT(refusal(with("layer_types", {"sliding_attention", "full_attention"})),
              HasSubstr("layer_types asks for sliding_attention, but no sliding window is set"));
  EXPECT_EQ(parse_config(with("no_rope_layers", {true, false, true}), "b.json").layer_rope,
            (std::vector<bool>{true, false}));  // (booleans as 1 and 0; entries past the layers unread)
}

// Written back (config_to_json) and read again: the NoPE layers listed, one entry per layer; biases as
// attention_bias / mlp_bias; another family has none.
TEST(SmolLM3, WrittenBackReadsTheSame) {
  json j = tiny_config_json("smollm3", 2);
  j["num_hidden_layers"] = 5, j["no_rope_layer_interval"] = 2, j["attention_bias"] = true, j["mlp_bias"] = true;
  const ModelConfig c = parse_config(j, "smollm3.json");
  const json out = config_to_json(c);
  EXPECT_EQ(out["no_rope_layers"], json({1, 0, 1, 0, 1}));
  EXPECT_EQ(out["attention_bias"], true);
  EXPECT_EQ(out["mlp_bias"], true);
  const ModelConfig back = parse_config(out, "written.json");
  EXPECT_EQ(back.layer_rope, c.layer_rope);
  EXPECT_TRUE(back.qkv_bias && back.o_bias && back.mlp_bias);
  const ModelConfig preset = preset_config("smollm3-3b");
  EXPECT_EQ(parse_config(config_to_json(preset), "p.json").layer_rope, preset.layer_rope);
  ModelConfig llama = c;
  set_arch(llama, Arch::Llama);
  EXPECT_TRUE(llama.layer_rope.empty());
  llama.layer_rope = {true, false, true, false, true};
  EXPECT_THAT(error_of([&] { config_to_json(llama); }), HasSubstr("NoPE layers belong to SmolLM3 only"));
}

// oomb init: the preset with other --layers, and another family's preset made SmolLM3, take
// SmolLM3Config's NoPE layers (every 4th), one per layer, in the config.json written.
TEST(SmolLM3, InitGivesEveryShapeItsNoPeLayers) {
  const auto dir = temp_dir();
  auto nope_of = [&](const std::string& args) {
    const std::string out = (dir / std::to_string(std::hash<std::string>{}(args))).string();
    const CmdResult r = oomb_cmd(dir, "init --out " + out + " " + args);
    EXPECT_EQ(r.code, 0) << r.out;
    return json::parse(read_text(std::filesystem::path(out) / "config.json"))["no_rope_layers"];
  };
  EXPECT_EQ(nope_of("--preset smollm3-3b --layers 6 --hidden 64 --heads 4 --kv-heads 2 --vocab 300"),
            json({1, 1, 1, 0, 1, 1}));
  EXPECT_EQ(nope_of("--preset tiny --arch smollm3 --layers 4"), json({1, 1, 1, 0}));
  EXPECT_EQ(nope_of("--preset tiny --arch llama"), json());  // (none: Llama's file has no such field)
}

// A NoPE layer's keys are its k projection as it is: for a sequence of two equal tokens at positions
// 0 and 1 the cache's K rows of that layer are equal (but for rounding: the layer below averaged
// two equal values for position 1), where a RoPE layer turns position 1's; read from the K pages
// generation fills.
TEST(SmolLM3, NoPeLayerKeysAreTheProjections) {
  const auto dir = temp_dir();
  json j = tiny_config_json("smollm3", 2);
  j["no_rope_layers"] = {1, 0};
  const ModelConfig cfg = write_tiny_model(dir, j, 3);
  auto be = make_cpu_backend();
  Model m(cfg, *be, ChunkPlan{4, 4});
  load_weights(dir, cfg, m.params());
  const std::vector<int32_t> ids = {7, 7};
  std::vector<float> logits(size_t(cfg.vocab));
  m.begin_decode(4);
  m.decode(ids.data(), 2, logits.data());
  const int64_t row = cfg.kv_heads * cfg.head_dim;
  for (int64_t l = 0; l < 2; ++l) {
    const Tensor k = m.kv().k(l, 0, 0, 2);  // (2, G, D): positions 0 and 1 of page 0
    ASSERT_EQ(k.numel(), 2 * row);
    const std::vector<float> k0(k.f(), k.f() + row), k1(k.f() + row, k.f() + 2 * row);
    const double apart = rel_error(k1, k0);
    if (cfg.rope_on(l)) EXPECT_GT(apart, 1e-2) << "layer " << l;
    else EXPECT_LT(apart, 1e-6) << "layer " << l;
    std::cout << fmt::format("[ smollm3  ] layer {} ({}): K rows of positions 0 and 1 apart by {:.1e}\n", l,
                             cfg.rope_on(l) ? "RoPE" : "NoPE", apart);
  }
  m.end_decode();
}

}  // namespace
