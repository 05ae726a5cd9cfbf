// fuzz-sources: hf/config.cpp hf/config_write.cpp model/rope.cpp
// Feeds bytes to nlohmann::json::parse then parse_config: only oomb::Error may come out. Successful parses must
// give finite inv_freq of rope_dim/2 values and survive config_to_json -> parse_config unchanged. The same
// JSON as the RoPE part of a config (with_rope_json, as --lora's oomb_rope.json is read): only oomb::Error,
// finite inv_freq; and a parsed config's rope_json moved onto the config without its RoPE gives the same
// inv_freq and rope_json back.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "hf/config.h"
#include "model/rope.h"

namespace {
// A small Llama config without RoPE fields (transformers' defaults apply).
const oomb::ModelConfig& plain_base() {
  static const oomb::ModelConfig c = oomb::parse_config(
      {{"model_type", "llama"}, {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 1},
       {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 32}},
      "fuzz/base.json");
  return c;
}

void check_rope_part(const nlohmann::json& j) {
  oomb::ModelConfig c;
  try {
    c = oomb::with_rope_json(plain_base(), j, "fuzz/oomb_rope.json");
  } catch (const oomb::Error&) {
    return;
  }
  for (int64_t length : {int64_t(0), oomb::rope_switch_length(c) + 1}) {
    float att = 0;
    for (float v : oomb::rope_inv_freq(c, &att, length))
      if (!std::isfinite(v)) std::abort();
    if (!std::isfinite(att)) std::abort();
  }
}

// inv_freq for a short and (longrope) a long sequence, then the attention scaling
std::vector<float> tables(const oomb::ModelConfig& c) {
  float att = 0;
  std::vector<float> t = oomb::rope_inv_freq(c, &att, 0);
  const std::vector<float> l = oomb::rope_inv_freq(c, nullptr, oomb::rope_switch_length(c) + 1);
  t.insert(t.end(), l.begin(), l.end());
  t.push_back(att);
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  check_rope_part(j);
  oomb::ModelConfig c;
  try {
    c = oomb::parse_config(j, "fuzz/config.json");
  } catch (const oomb::Error&) {
    return 0;
  }
  const std::vector<float> inv = tables(c);
  if (inv.size() != size_t(oomb::rope_dim(c) + 1) || !std::isfinite(inv.back())) std::abort();
  oomb::ModelConfig d = oomb::parse_config(oomb::config_to_json(c), "fuzz/roundtrip.json");
  const std::vector<float> inv2 = tables(d);
  bool same = d.arch == c.arch && d.hidden == c.hidden && d.heads == c.heads && d.kv_heads == c.kv_heads &&
              d.head_dim == c.head_dim && d.vocab == c.vocab && d.eos_token_id == c.eos_token_id &&
              d.bos_token_id == c.bos_token_id && d.rope.type == c.rope.type && d.rope.theta == c.rope.theta &&
              d.rope.factor == c.rope.factor && d.qkv_bias == c.qkv_bias && d.torch_dtype == c.torch_dtype &&
              d.rope.original_max_position_embeddings == c.rope.original_max_position_embeddings &&
              d.rope.short_factor == c.rope.short_factor && d.rope.long_factor == c.rope.long_factor &&
              d.layer_window == c.layer_window && d.rms_norm_eps == c.rms_norm_eps &&
              d.rope.partial_rotary_factor == c.rope.partial_rotary_factor &&
              d.embedding_multiplier == c.embedding_multiplier && d.residual_multiplier == c.residual_multiplier &&
              d.attention_multiplier == c.attention_multiplier && d.logits_scaling == c.logits_scaling &&
              d.o_bias == c.o_bias && d.mlp_bias == c.mlp_bias && d.layer_rope == c.layer_rope &&
              d.tie_word_embeddings == c.tie_word_embeddings;
  for (size_t i = 0; same && i < inv.size(); ++i)
    same = inv[i] == inv2[i] || (std::isnan(inv[i]) && std::isnan(inv2[i]));
  if (!same) {
    std::fprintf(stderr, "config_to_json round trip changed the config\n");
    std::abort();
  }
  // the RoPE alone, moved onto the same config stripped of it
  nlohmann::json bare = oomb::config_to_json(c);
  for (const char* k : {"rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings",
                        "original_max_position_embeddings"})
    bare.erase(k);
  const nlohmann::json rope = oomb::rope_json(c);
  oomb::ModelConfig moved;
  try {
    moved = oomb::with_rope_json(oomb::parse_config(bare, "fuzz/bare.json"), rope, "fuzz/rope.json");
  } catch (const oomb::Error& e) {
    std::fprintf(stderr, "a parsed config's rope_json was refused: %s\n", e.what());
    std::abort();
  }
  const std::vector<float> inv3 = tables(moved);
  for (size_t i = 0; i < inv.size(); ++i)
    if (!(inv[i] == inv3[i] || (std::isnan(inv[i]) && std::isnan(inv3[i])))) std::abort();
  if (oomb::rope_json(moved) != rope) {
    std::fprintf(stderr, "rope_json did not survive with_rope_json\n");
    std::abort();
  }
  return 0;
}
