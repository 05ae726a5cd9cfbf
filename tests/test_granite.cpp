// Granite (GraniteForCausalLM, hf/config.h): a Llama with four multipliers. IBM's config.json read with
// GraniteConfig's defaults, refused where the engine cannot follow it, written back the same; the
// logits generation samples from are the lm_head's divided by logits_scaling; --keep-attention's
// passes give the recompute's bits; --precision bf16 tracks fp32; a run through the CLI trains and
// saves a Granite. (Its loss and gradients against the float64 oracle: Oracle.Granite, and under
// sparse attention's recorded mask SparseModel's; --sweep layer, --offload params, --sp and ZeRO-3,
// generation and the CUDA step (simt): those suites' Granite cases; the bf16 budget against
// PyTorch's bf16 and transformers' own Granite: pending until a GPU session commits its fixture.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <fmt/format.h>

#include "hf/checkpoint.h"
#include "hf/config.h"
#include "model/init.h"
#include "model/params.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/model.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Granite 3.2 / 3.3 8B's config.json as IBM publishes it
const char* kGranite8b = R"({"architectures": ["GraniteForCausalLM"], "attention_bias": false,
  "attention_dropout": 0.0, "attention_multiplier": 0.0078125, "bos_token_id": 0, "embedding_multiplier": 12.0,
  "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 12800, "logits_scaling": 16.0, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "granite", "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8,
  "pad_token_id": 0, "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 10000000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.49.0", "use_cache": true, "vocab_size": 49159})";

std::string refusal(const json& j) {
  return error_of([&] { parse_config(j, "granite.json"); });
}

TEST(Granite, ReadsIbmsConfig) {
  const ModelConfig c = parse_config(json::parse(kGranite8b), "granite.json");
  EXPECT_EQ(c.arch, Arch::Granite);
  EXPECT_EQ(c.model_type, "granite");
  EXPECT_EQ(c.embedding_multiplier, 12.0);
  EXPECT_EQ(c.residual_multiplier, 0.22);
  EXPECT_EQ(c.attention_multiplier, 0.0078125);
  EXPECT_EQ(c.logits_scaling, 16.0);
  EXPECT_EQ(attention_scale(c), 0.0078125f);  // 1/128, where 1/sqrt(head_dim 128) would be 1/11.3
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.rope.theta, 1e7);
  EXPECT_EQ(c.layer_window, std::vector<int64_t>(40, 0));
  // the preset is this file's model: its parameters counted here from the shapes
  const int64_t d = 4096, kv = 8 * 128, I = 12800, layer = 2 * d * d + 2 * kv * d + 3 * I * d + 2 * d;
  EXPECT_EQ(param_count(c), 49159 * d + 40 * layer + d);
  const ModelConfig p = preset_config("granite-3.3-8b");
  EXPECT_EQ(param_count(p), param_count(c));
  EXPECT_EQ(config_to_json(p)["logits_scaling"], 16.0);
  EXPECT_EQ(attention_scale(p), attention_scale(c));
}

// GraniteConfig's defaults where the file says nothing: 1.0 each, so attention's scale is 1 (not
// 1/sqrt(head_dim)); bos 1, eos 2, 2048 positions, eps 1e-6. Another family's file naming a
// multiplier keeps its own attention (transformers' Llama reads no such field).
TEST(Granite, DefaultsAreGraniteConfigs) {
  json j = tiny_config_json("granite", 2);
  for (const char* k : {"max_position_embeddings", "rms_norm_eps"}) j.erase(k);
  const ModelConfig c = parse_config(j, "granite.json");
  EXPECT_EQ(c.embedding_multiplier, 1.0);
  EXPECT_EQ(c.residual_multiplier, 1.0);
  EXPECT_EQ(c.logits_scaling, 1.0);
  EXPECT_EQ(attention_scale(c), 1.0f);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.pad_token_id, -1);
  json llama = tiny_config_json("llama", 2);
  llama["attention_multiplier"] = 0.5, llama["residual_multiplier"] = 0.5;
  const ModelConfig l = parse_config(llama, "llama.json");
  EXPECT_EQ(attention_scale(l), float(1.0 / std::sqrt(8.0)));
  EXPECT_EQ(l.residual_multiplier, 1.0);
}

TEST(Granite, RefusedWhereItCannotBeFollowed) {
  const json g = tiny_config_json("granite", 2);
  auto with = [&](const char* k, const json& v) {
    json j = g;
    j[k] = v;
    return j;
  };
  EXPECT_THAT(refusal(with("residual_multiplier", 0.0)), HasSubstr("field 'residual_multiplier' must be positive, got 0"));
  EXPECT_THAT(refusal(with("logits_scaling", -16.0)), HasSubstr("field 'logits_scaling' must be positive, got -16"));
  EXPECT_THAT(refusal(with("embedding_multiplier", "12")), HasSubstr("field 'embedding_multiplier' must be a number"));
  EXPECT_THAT(refusal(with("attention_multiplier", 1e39)),
              HasSubstr("field 'attention_multiplier' = 1e+39 is outside float32's range"));
  EXPECT_THAT(refusal(with("logits_scaling", 1e-46)), HasSubstr("field 'logits_scaling' = 1e-46 is outside float32's range"));
  // a float32 logits_scaling whose reciprocal is not: the engine multiplies by that
  EXPECT_THAT(refusal(with("logits_scaling", 2e-39)),
              HasSubstr("field 'logits_scaling' = 2e-39 is outside float32's range (the engine multiplies by 1 / it"));
  EXPECT_THAT(refusal(with("embedding_multiplier", 1e39)), HasSubstr("(the engine multiplies by it in float32)"));
  EXPECT_THAT(refusal(with("layer_types", {"sliding_attention", "full_attention"})), HasSubstr("(Granite has none)"));
  json mismatch = g;
  mismatch["model_type"] = "llama";
  EXPECT_THAT(refusal(mismatch), HasSubstr("architectures[0] 'GraniteForCausalLM' does not match model_type 'llama'"));
}

// Written back (config_to_json) and read again: the same model, each multiplier to the bit, biases as
// attention_bias / mlp_bias; another family takes none of them.
TEST(Granite, WrittenBackReadsTheSame) {
  json j = json::parse(kGranite8b);
  j["attention_bias"] = true, j["mlp_bias"] = true, j["residual_multiplier"] = 0.1 + 0.2;  // (0.30000000000000004)
  const ModelConfig c = parse_config(j, "granite.json");
  const json out = config_to_json(c);
  for (const char* k : {"embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling",
                        "attention_bias", "mlp_bias"})
    EXPECT_EQ(out[k], j[k]) << k;
  const ModelConfig back = parse_config(out, "written.json");
  EXPECT_EQ(back.residual_multiplier, 0.1 + 0.2);
  EXPECT_TRUE(back.qkv_bias && back.o_bias && back.mlp_bias);
  EXPECT_EQ(param_count(back), param_count(c));
  ModelConfig llama = c;
  set_arch(llama, Arch::Llama);  // a Granite's weights as a Llama: none of its multipliers
  EXPECT_EQ(attention_scale(llama), float(1.0 / std::sqrt(128.0)));
  const ModelConfig as_llama = parse_config(config_to_json(llama), "llama.json");  // (its fields kept, unread)
  EXPECT_EQ(as_llama.arch, Arch::Llama);
  EXPECT_EQ(as_llama.logits_scaling, 1.0);
  llama.logits_scaling = 2;
  EXPECT_THAT(error_of([&] { config_to_json(llama); }), HasSubstr("belong to Granite only"));
}

// The logits (evaluation's and generation's, the one path of both) are the lm_head's over
// logits_scaling: with a power of two the same bits as the unscaled model's divided, in fp32 and
// under --precision bf16 (whose lm_head input is bf16: dividing it by 4 is exact too).
TEST(Granite, LogitsAreTheLmHeadsDividedByLogitsScaling) {
  const auto dir = temp_dir();
  json j = tiny_granite_json(2);
  j["logits_scaling"] = 1.0;
  write_tiny_model(dir / "one", j, 3);
  j["logits_scaling"] = 4.0;
  write_tiny_model(dir / "four", j, 3);
  const std::vector<int32_t> ids = {0, 5, 17, 42, 8, 8, 30, 1, 59, 12, 3};
  const int64_t N = int64_t(ids.size());
  auto be = make_cpu_backend();
  for (const DType precision : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(precision));
    auto logits = [&](const fs::path& m) {
      const ModelConfig cfg = load_config(m);
      ChunkPlan plan{4, 4};
      plan.precision = precision;
      Model model(cfg, *be, plan);
      load_weights(m, cfg, model.params());
      std::vector<float> out(size_t(N * cfg.vocab));
      model.logits(ids.data(), N, out.data());
      return out;
    };
    const std::vector<float> one = logits(dir / "one"), four = logits(dir / "four");
    size_t moved = 0;
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(four[i], one[i] / 4) << i;
      moved += four[i] != one[i];
    }
    EXPECT_GT(moved, one.size() / 2);
  }
}

// --keep-attention's passes (the layers below the top make only their output, OutputOnly; the top
// its internals from the kept attention output) scale the branches as the recompute does: the same
// bits, in fp32 and under --precision bf16, in both sweep orders.
TEST(Granite, KeepingAttentionGivesTheRecomputedBits) { expect_kept_attention_bits(tiny_granite_json(2), 6); }

// --precision bf16 on a Granite: within bf16's reach of the fp32 step (the loss 1e-2, the whole
// gradient 3e-2: the multipliers' scaled gradients in bf16 scratch, the lm_head's input divided in
// bf16); a bf16 path that dropped a multiplier would be off by its factor (0.37, 3.5, 2.7: tens of
// percent). (Its budget against PyTorch's bf16 waits for the GPU's fixture: test_precision.)
TEST(Granite, Bf16StepTracksTheF32Step) { expect_bf16_tracks_f32(tiny_granite_json(2), 8, "granite"); }

// Through the CLI: a Granite learns a repeating sequence (its loss falls) and saves a Granite, the
// multipliers as read.
TEST(Granite, CliTrainsAndSavesAGranite) {
  const auto dir = temp_dir();
  const fs::path m = dir / "m", out = dir / "out";
  write_tiny_model(m, tiny_granite_json(2), 4);
  expect_cli_trains(dir, m, out);
  const json saved = json::parse(read_text(out / "config.json")), given = json::parse(read_text(m / "config.json"));
  EXPECT_EQ(saved["architectures"], json::array({"GraniteForCausalLM"}));
  for (const char* k : {"embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"})
    EXPECT_EQ(saved[k], given[k]) << k;
}

}  // namespace
