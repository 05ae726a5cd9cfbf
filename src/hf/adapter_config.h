// PEFT's adapter_config.json for a LoRA adapter: parsed into what this engine trains (naming the
// file and the field of anything it cannot: a bad type, a dropout outside [0, 1), bias, per-module ranks, DoRA, a
// subset of layers, ...), and written as PeftModel.from_pretrained reads it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/lora.h"

namespace oomb {

// j: the file's JSON; file: its path, for the messages. Throws oomb::Error only.
LoraConfig parse_adapter_config(const nlohmann::json& j, const std::string& file);
// The config for c; modules_to_save: PEFT's names of the trainable base tensors (LongLoRA's
// embeddings and norms), used when c.train_embeddings_norms; fused_qkv, fused_gate_up: target_modules
// names that fused linear as one (Phi-3's qkv_proj and gate_up_proj, GLM's gate_up_proj).
nlohmann::json adapter_config_json(const LoraConfig& c, const std::string& base_model,
                                   const std::vector<std::string>& modules_to_save, bool fused_qkv = false,
                                   bool fused_gate_up = false);

}  // namespace oomb
