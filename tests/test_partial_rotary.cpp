// Phi-3's partial rotation (partial_rotary_factor, Phi-4-mini's 0.75): read from the top level or from
// the RoPE dict as transformers 5 reads it, refused where the family's attention takes whole heads or the
// dims turned are not even, LongRoPE's lists counted in rotary dims, and written back so that it reads
// the same. The numbers themselves are checked against the float64 oracle (Oracle.Phi3PartialRotary)
// and the op against its own reference (RopeForwardBackward, CudaOps).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/rope_flags.h"
#include "hf/config.h"
#include "model/init.h"
#include "model/rope.h"

using namespace oomb;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

// In the shape of Phi-4-mini-instruct's config.json, with stand-ins for its 48 + 48 LongRoPE factors.
json phi4mini() {
  json j = json::parse(R"({"architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 199999, "embd_pdrop": 0.0, "eos_token_id": 199999, "full_attn_mod": 1, "hidden_act": "silu",
    "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "interpolate_factor": 1,
    "lm_head_bias": false, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "phi3",
    "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "original_max_position_embeddings": 4096, "pad_token_id": 199999, "partial_rotary_factor": 0.75,
    "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 262144,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 200064})");
  json shorts = json::array(), longs = json::array();
  for (int i = 0; i < 48; ++i) shorts.push_back(1.0 + 0.01 * i), longs.push_back(1.0 + 1.5 * i);
  j["rope_scaling"] = {{"long_factor", longs}, {"short_factor", shorts}, {"type", "longrope"}};
  return j;
}

std::string error_of(const json& j) {
  try {
    parse_config(j, "/m/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<float> table(const ModelConfig& c, int64_t length) {
  float att = 0;
  return rope_inv_freq(c, &att, length);
}

}  // namespace

TEST(PartialRotary, Phi4MiniTurns96Of128Dims) {
  const ModelConfig c = parse_config(phi4mini(), "p.json");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope.partial_rotary_factor, 0.75);
  EXPECT_EQ(rope_dim(c), 96);
  EXPECT_EQ(table(c, 100).size(), 48u);
  EXPECT_EQ(table(c, 5000).size(), 48u);  // the long factors
  EXPECT_NE(table(c, 100), table(c, 5000));
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.pad_token_id, 199999);
  // LongRoPE's lists have one entry per rotary frequency: head_dim / 2 would be 64
  json full = phi4mini();
  for (const char* k : {"short_factor", "long_factor"}) {
    json j = full;
    j["rope_scaling"][k] = std::vector<double>(64, 1.0);
    EXPECT_THAT(error_of(j), HasSubstr(std::string("field 'rope_scaling.") + k + "' has 64 entries; 96 rotary "
                                       "dims need 48"));
  }
}

// The default RoPE turning 96 of 128 dims is the whole-head RoPE of a 96-dim head: the exponents
// divide by the rotary dims, not by head_dim (transformers' dim = int(head_dim * partial_rotary_factor))
TEST(PartialRotary, FrequenciesCountRotaryDims) {
  json j = phi4mini();
  j.erase("rope_scaling");
  json whole = j;
  whole.erase("partial_rotary_factor");
  whole["head_dim"] = 96;
  EXPECT_EQ(table(parse_config(j, "a"), 0), table(parse_config(whole, "b"), 0));
  whole["head_dim"] = 128;  // (the first 48 frequencies of a whole 128-dim head are others)
  std::vector<float> w128 = table(parse_config(whole, "b"), 0);
  w128.resize(48);
  EXPECT_NE(table(parse_config(j, "a"), 0), w128);
}

TEST(PartialRotary, TopLevelOrInTheRopeDict) {
  const ModelConfig top = parse_config(phi4mini(), "t");
  json in_dict = phi4mini();
  in_dict.erase("partial_rotary_factor");
  in_dict["rope_scaling"]["partial_rotary_factor"] = 0.75;
  const ModelConfig d = parse_config(in_dict, "d");
  EXPECT_EQ(d.rope.partial_rotary_factor, 0.75);
  EXPECT_EQ(table(d, 100), table(top, 100));
  // transformers 5's form
  json v5 = phi4mini();
  v5.erase("rope_theta");
  v5.erase("partial_rotary_factor");
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["partial_rotary_factor"] = 0.75;
  v5["rope_parameters"]["rope_theta"] = 10000.0;
  v5["rope_scaling"] = nullptr;
  EXPECT_EQ(table(parse_config(v5, "v5"), 5000), table(top, 5000));
  // both, the same: one value; different: refused, naming both
  json both = in_dict;
  both["partial_rotary_factor"] = 0.75;
  EXPECT_EQ(parse_config(both, "b").rope.partial_rotary_factor, 0.75);
  both["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(error_of(both), HasSubstr("config /m/config.json: 'partial_rotary_factor' is 0.5 at the top level "
                                        "but 0.75 in 'rope_scaling': give one"));
}

TEST(PartialRotary, RefusedWhereItCannotBeMet) {
  json j = phi4mini();
  j["partial_rotary_factor"] = 0.7;  // int(128 * 0.7) = 89: odd
  j.erase("rope_scaling");
  EXPECT_THAT(error_of(j), HasSubstr("field 'partial_rotary_factor' = 0.7 turns int(128 * 0.7) = 89 dims of each "
                                     "head; an even number of at least 2 is needed"));
  for (const double f : {0.0, -0.5, 1.5}) {
    j["partial_rotary_factor"] = f;
    EXPECT_THAT(error_of(j), HasSubstr("field 'partial_rotary_factor' must be in (0, 1]")) << f;
  }
  j["partial_rotary_factor"] = 0.01;  // one dim
  EXPECT_THAT(error_of(j), HasSubstr("= 1 dims of each head"));
  // the other families' attention turns whole heads (transformers' apply_rotary_pos_emb fails on less)
  json llama = j;
  llama["architectures"] = {"LlamaForCausalLM"}, llama["model_type"] = "llama";
  llama["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(error_of(llama), HasSubstr("field 'partial_rotary_factor' = 0.5 is not supported on LlamaForCausalLM"));
  llama["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(rope_dim(parse_config(llama, "l")), 128);
  llama.erase("partial_rotary_factor");
  llama["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}};
  EXPECT_THAT(error_of(llama), HasSubstr("field 'rope_scaling.partial_rotary_factor' = 0.5 is not supported"));
}

// Written at the top level, where transformers 4.x reads it and 5 takes it into its dict; read back the same.
TEST(PartialRotary, WrittenBackReadsTheSame) {
  json in_dict = phi4mini();
  in_dict.erase("partial_rotary_factor");
  in_dict["rope_scaling"]["partial_rotary_factor"] = 0.75;
  for (const json& j : {phi4mini(), in_dict}) {
    const ModelConfig c = parse_config(j, "c");
    const json out = config_to_json(c);
    EXPECT_EQ(out.at("partial_rotary_factor"), 0.75);
    EXPECT_FALSE(out.at("rope_scaling").contains("partial_rotary_factor"));  // (4.x's Phi3Config wants three keys)
    const ModelConfig back = parse_config(out, "back");
    EXPECT_EQ(back.rope.partial_rotary_factor, 0.75);
    EXPECT_EQ(table(back, 5000), table(c, 5000));
    EXPECT_EQ(table(back, 100), table(c, 100));
  }
  // the preset: Phi-4-mini's shape, its config written and read back
  const ModelConfig p = preset_config("phi-4-mini");
  EXPECT_EQ(rope_dim(p), 96);
  const ModelConfig pb = parse_config(config_to_json(p), "preset");
  EXPECT_EQ(rope_dim(pb), 96);
  EXPECT_EQ(table(pb, 0), table(p, 0));
  EXPECT_EQ(pb.kv_heads, 8);
  EXPECT_TRUE(pb.tie_word_embeddings);
}

// The --rope-* flags change the RoPE's frequencies, never how much of a head it turns: a scaling
// dropped (--rope-scaling none) or a new theta keeps Phi-4-mini's 96 of 128 dims.
TEST(PartialRotary, RopeFlagsKeepTheRotaryDims) {
  const ModelConfig c = parse_config(phi4mini(), "p");
  cli::RopeFlags none;
  none.scaling = "none";
  const ModelConfig n = cli::apply_rope_flags(c, none, "m");
  EXPECT_EQ(n.rope.type, "default");
  EXPECT_EQ(rope_dim(n), 96);
  EXPECT_EQ(table(n, 0).size(), 48u);
  cli::RopeFlags theta;
  theta.theta = 500000;
  const ModelConfig t = cli::apply_rope_flags(c, theta, "m");
  EXPECT_EQ(t.rope.type, "longrope");
  EXPECT_EQ(rope_dim(t), 96);
  json in_dict = phi4mini();  // read from the dict alone, written back at the top level
  in_dict.erase("partial_rotary_factor");
  in_dict["rope_scaling"]["partial_rotary_factor"] = 0.75;
  EXPECT_EQ(rope_dim(cli::apply_rope_flags(parse_config(in_dict, "d"), none, "m")), 96);
}
