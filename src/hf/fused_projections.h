// Phi-3's and GLM's fused checkpoint tensors (ModelConfig::fused_qkv, fused_gate_up): self_attn.qkv_proj
// holds q, k and v as row blocks [q; k; v] (Phi-3), mlp.gate_up_proj holds [gate; up] (both). The model
// keeps them apart.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/memory.h"
#include "hf/config.h"
#include "hf/safetensors.h"

namespace oomb {

// Where an unfused parameter lives in the checkpoint: rows [row0, row0 + rows) of `fused`, which
// has fused_rows rows. Nothing for a parameter stored as itself (or when c fuses nothing).
struct FusedPart {
  std::string fused;
  int64_t row0 = 0, rows = 0, fused_rows = 0;
  std::vector<std::string> parts;  // every part's name, in the fused tensor's row order
};
std::optional<FusedPart> fused_part(const ModelConfig& c, const std::string& name);

// The tensors to save: each layer's q, k, v (and gate, up) joined into its fused tensor at q's (gate's)
// place. Parts adjacent in memory are joined in place; others are copied into `storage`. Every save of
// model weights goes through it (`in` as it is for a model without fused tensors).
std::vector<SaveTensor> fuse_for_save(const ModelConfig& c, std::span<const SaveTensor> in,
                                      std::vector<Buffer>& storage);

}  // namespace oomb
