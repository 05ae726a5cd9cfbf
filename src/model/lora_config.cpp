// LoraConfig's own functions (model/lora.h): its scale, its targets' names, --lora-targets' parse
// and the flags' check; apart from the layout's code, so a parser (hf/adapter_config) needs no more.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "model/lora.h"  // (LoraConfig's header: the layout's too)

namespace oomb {

float LoraConfig::scale() const {
  return float(rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank));
}

std::vector<std::string> LoraConfig::target_names(bool fused_qkv, bool fused_gate_up) const {
  std::vector<std::string> r;
  for (int i = 0; i < kLoraTargets; ++i) {
    if (!targets[i]) continue;
    const auto m = std::find_if(std::begin(kLoraFused), std::end(kLoraFused), [&](const LoraFusedModule& f) {
      return std::find(f.parts.begin(), f.parts.end(), i) != f.parts.end();
    });
    const bool fused = m != std::end(kLoraFused) && (m->parts.size() == 3 ? fused_qkv : fused_gate_up);
    if (!fused) r.push_back(kLoraModules[i]);
    else if (m->parts.front() == i) r.push_back(m->name);  // (its other parts: the same module)
  }
  return r;
}

void parse_lora_targets(const std::string& list, LoraConfig& c, const std::string& flag) {
  for (bool& t : c.targets) t = false;
  std::stringstream ss(list);
  std::string item;
  static const char* shorts[kLoraTargets] = {"q", "k", "v", "o", "gate", "up", "down"};
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (item == "all" || item == "all-linear") {
      for (bool& t : c.targets) t = true;
      continue;
    }
    bool found = false;
    for (const LoraFusedModule& m : kLoraFused)
      if (item == m.name || item == m.short_name)
        for (const int i : m.parts) c.targets[i] = found = true;
    for (int i = 0; i < kLoraTargets; ++i)
      if (item == shorts[i] || item == kLoraModules[i]) c.targets[i] = found = true;
    OOMB_CHECK(found, "{}: '{}' is not a module LoRA can adapt (q, k, v, o, gate, up, down, their PEFT names "
               "q_proj .. down_proj, Phi-3's fused qkv_proj and gate_up_proj (GLM's gate_up_proj), or all)", flag, item);
  }
}

void check_lora(const LoraConfig& c) {
  OOMB_CHECK(c.rank > 0, "--lora-rank: must be at least 1, got {}", c.rank);
  OOMB_CHECK(c.alpha > 0 && std::isfinite(c.alpha), "--lora-alpha: must be positive, got {}", c.alpha);
  OOMB_CHECK(!c.target_names().empty(), "--lora-targets: names no module");
  check_lora_dropout(c.dropout, "--lora-dropout");
}

void check_lora_dropout(double p, const std::string& where) {
  OOMB_CHECK(std::isfinite(p) && p >= 0 && p < 1, "{}: must be in [0, 1), got {}", where, p);
}

}  // namespace oomb
