// fuzz-sources: hf/adapter_config.cpp model/lora_config.cpp
// Feeds bytes to nlohmann::json::parse then parse_adapter_config (a PEFT adapter_config.json): only
// oomb::Error may come out. A config that parses has a rank in range, a positive finite alpha and a
// target, and survives adapter_config_json -> parse unchanged.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "fuzz_check.h"
#include "hf/adapter_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  oomb::LoraConfig c;
  try {
    c = oomb::parse_adapter_config(j, "fuzz/adapter_config.json");
  } catch (const oomb::Error&) {
    return 0;
  }
  check(c.rank >= 1 && c.rank <= (int64_t(1) << 20), "rank in range");
  check(c.alpha > 0 && std::isfinite(c.alpha), "alpha positive and finite");
  check(!c.target_names().empty(), "a target");
  const std::vector<std::string> save = {"embed_tokens", "norm"};
  const nlohmann::json out = oomb::adapter_config_json(c, "fuzz", save);
  const oomb::LoraConfig d = oomb::parse_adapter_config(out, "fuzz/roundtrip.json");
  check(d.rank == c.rank && d.alpha == c.alpha && d.rslora == c.rslora &&
            d.train_embeddings_norms == c.train_embeddings_norms && d.dropout == c.dropout &&
            std::memcmp(d.targets, c.targets, sizeof c.targets) == 0,
        "adapter_config_json round trip");
  return 0;
}
