// LoRA's flags, shared by oomb train and oomb plan (model/lora.h, hf/peft.h).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "model/lora.h"

namespace oomb::cli {

struct LoraFlags {
  int64_t rank = 0;
  double alpha = 16, dropout = 0;
  std::string targets = "q,v", dir;
  bool rslora = false, train_embeddings_norms = false;
};

// --lora-rank, --lora-alpha, --lora-targets, --lora-dropout, --rslora, --train-embeddings-norms;
// with_dir: --lora DIR (continue from a PEFT adapter).
void add_lora_flags(CLI::App* c, LoraFlags& f, bool with_dir);
// The run's LoRA: off without --lora-rank or --lora; from the adapter's adapter_config.json with
// --lora DIR (a --lora-* flag that disagrees with it is an error naming both values; but
// --lora-dropout, a training choice, replaces the adapter's lora_dropout).
LoraConfig lora_config(const LoraFlags& f, const CLI::App* cmd);
// Without --lora-targets (nor --lora DIR), a model whose files fuse q, k and v (Phi-3) adapts its
// qkv_proj, the linear holding the default's q and v (which cannot be adapted apart there).
void default_lora_targets(LoraConfig& c, const LoraFlags& f, const CLI::App* cmd, const ModelConfig& cfg);

}  // namespace oomb::cli
