// A model of --model's weights, with a PEFT LoRA adapter on it when one is given (oomb eval and
// oomb generate): the adapter's config sets the plan's LoRA, the base loads into the model's own
// layout (a frozen bf16 base under --precision bf16), the adapter into its trainable set.
#pragma once
#include <memory>
#include <string>

#include "train/model.h"

namespace oomb::cli {

// sp: the ranks sharing each sequence (--sp), or null for one rank.
std::unique_ptr<Model> load_model_and_adapter(const std::string& model_dir, const std::string& lora_dir,
                                              const ModelConfig& cfg, Backend& be, ChunkPlan plan, Comm* sp = nullptr);

}  // namespace oomb::cli
