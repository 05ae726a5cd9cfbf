// LoRA (arXiv 2106.09685) as PEFT defines it: a frozen base linear y = x W^T + b gains
// s * (x A^T) B^T with A (r, in), B (out, r) trainable, s = alpha / r (rsLoRA: alpha / sqrt(r)).
// B starts at zero and A as PEFT initialises it (kaiming-uniform: U(-1/sqrt(in), 1/sqrt(in))), so
// training starts from the base model. Optionally (LongLoRA) the embeddings and every norm train
// too. The trainable tensors live in one flat Params of their own (lora_layout): adapters by PEFT's
// names, trainable base tensors by their Hugging Face names.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hf/config.h"
#include "model/params.h"

namespace oomb {

// The linear layers LoRA may adapt (LayerParams::lora's order), by PEFT's module names.
inline constexpr const char* kLoraModules[kLoraTargets] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                           "gate_proj", "up_proj", "down_proj"};
// The fused linears of Phi-3's files (GLM's: gate_up_proj alone), which PEFT adapts as one module each: its name, --lora-targets'
// short one, and the targets it holds (its first is the module's own).
struct LoraFusedModule {
  const char *name, *short_name;
  std::vector<int> parts;
};
inline const LoraFusedModule kLoraFused[] = {{"qkv_proj", "qkv", {kQ, kK, kV}},
                                              {"gate_up_proj", "gate_up", {kGate, kUp}}};

struct LoraConfig {
  int64_t rank = 0;  // 0: no LoRA (full fine-tuning)
  double alpha = 16;
  bool targets[kLoraTargets] = {};  // by kLoraModules' index
  bool rslora = false;
  bool train_embeddings_norms = false;  // LongLoRA: embeddings and norms trainable too
  // PEFT's lora_dropout: while training, each adapter's input x dropped elementwise with this
  // probability (the rest scaled by 1 / (1 - p)), its mask a function of the value's place
  // (backend/dropout_mask.h); the base linear reads x itself. Not in evaluation or generation.
  double dropout = 0;
  bool on() const { return rank > 0; }
  float scale() const;
  // PEFT's module names, in kLoraModules' order; fused_qkv, fused_gate_up: that fused linear's parts as
  // its one name (qkv_proj, gate_up_proj: a Phi-3's target_modules; gate_up_proj alone: a GLM's)
  std::vector<std::string> target_names(bool fused_qkv = false, bool fused_gate_up = false) const;
};

// Parses --lora-targets: a comma list of q,k,v,o,gate,up,down (or PEFT's q_proj, ...), or all.
// Throws naming the flag and the unknown name.
void parse_lora_targets(const std::string& list, LoraConfig& c, const std::string& flag = "--lora-targets");
// Checks rank, alpha and targets, naming the flag.
void check_lora(const LoraConfig& c);
// A dropout probability in [0, 1); throws naming `where` (a flag, or a file and its field).
void check_lora_dropout(double p, const std::string& where);

// PEFT's name of an adapter tensor: base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight. On a
// model whose files fuse linears (Phi-3), PEFT adapts the fused module: q, k and v share one adapter
// named by qkv_proj (A (r, in), B (q + k + v rows, r)), gate and up one named by gate_up_proj.
std::string lora_name(const ModelConfig& cfg, int64_t layer, int target, bool b);
// The adapter whose tensors and dropout mask target t shares: the first part of its fused linear
// (q for k and v, gate for up on Phi-3), else t itself.
int lora_module(const ModelConfig& cfg, int target);
// The trainable layout: every adapter (A then B, layers in order, targets in kLoraModules' order),
// then, with train_embeddings_norms, the embedding and every norm (an untied lm_head stays frozen).
std::vector<ParamSpec> lora_layout(const ModelConfig& cfg, const LoraConfig& c);
int64_t lora_param_count(const ModelConfig& cfg, const LoraConfig& c);
// The shape PEFT gives an adapter: A (r, in), B (out, r) (a fused linear's out: all its parts' rows).
std::vector<int64_t> lora_shape(const ModelConfig& cfg, const LoraConfig& c, int target, bool b);
// Target t's adapter in layer l, from `get` (a tensor of lora_layout by name): A, and B's rows that are
// t's (all of B unless t is part of a fused linear, whose A its parts share).
LoraPair lora_pair(const std::function<Tensor(const std::string&)>& get, const ModelConfig& cfg, int64_t layer,
                   int target);

// Binds the adapters of `trainable` (a Params of lora_layout) into each layer's LoRA slots, and,
// with train_embeddings_norms, its norms over the base ones. `base` gives the frozen rest.
std::vector<LayerParams> lora_layers(const std::vector<LayerParams>& base, const Params& trainable,
                                     const ModelConfig& cfg, const LoraConfig& c);
// A as PEFT initialises it (seeded), B zero; trainable base tensors copied from `base`.
void init_lora(Params& trainable, const Params& base, uint64_t seed);

}  // namespace oomb
