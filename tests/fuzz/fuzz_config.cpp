// fuzz-sources: hf/config.cpp model/rope.cpp
// Feeds bytes to nlohmann::json::parse then parse_config: only oomb::Error may come out. Successful parses must
// give finite inv_freq of head_dim/2 values and survive config_to_json -> parse_config unchanged.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "hf/config.h"
#include "model/rope.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  oomb::ModelConfig c;
  try {
    c = oomb::parse_config(j, "fuzz/config.json");
  } catch (const oomb::Error&) {
    return 0;
  }
  float att = 0;
  std::vector<float> inv = oomb::rope_inv_freq(c, &att);
  if (inv.size() != size_t(c.head_dim / 2) || !std::isfinite(att)) std::abort();
  oomb::ModelConfig d = oomb::parse_config(oomb::config_to_json(c), "fuzz/roundtrip.json");
  std::vector<float> inv2 = oomb::rope_inv_freq(d, nullptr);
  bool same = d.arch == c.arch && d.hidden == c.hidden && d.heads == c.heads && d.kv_heads == c.kv_heads &&
              d.head_dim == c.head_dim && d.vocab == c.vocab && d.eos_token_id == c.eos_token_id &&
              d.bos_token_id == c.bos_token_id && d.rope.type == c.rope.type && d.rope.theta == c.rope.theta &&
              d.rope.factor == c.rope.factor && d.qkv_bias == c.qkv_bias && d.torch_dtype == c.torch_dtype &&
              d.rope.original_max_position_embeddings == c.rope.original_max_position_embeddings;
  for (size_t i = 0; same && i < inv.size(); ++i)
    same = inv[i] == inv2[i] || (std::isnan(inv[i]) && std::isnan(inv2[i]));
  if (!same) {
    std::fprintf(stderr, "config_to_json round trip changed the config\n");
    std::abort();
  }
  return 0;
}
