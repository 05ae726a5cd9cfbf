// What config.json's reader (config.cpp) and writer (config_write.cpp) share; internal to src/hf.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "hf/config.h"

namespace oomb::config_detail {

struct ArchInfo {
  Arch arch;
  const char* architecture;
  const char* model_type;
  int64_t max_pos;  // transformers' default max_position_embeddings
  int64_t bos, eos;  // transformers' default bos/eos_token_id (-1: None)
  int64_t pad;       // transformers' default pad_token_id (-1: None)
  double eps;        // transformers' default rms_norm_eps
  double theta = 10000.0;  // transformers' default rope_theta
  int64_t kv_heads = 0;    // transformers' default num_key_value_heads (0: num_attention_heads)
};
const ArchInfo& arch_info(Arch a);
// GLM and GLM-4, which share GlmConfig's defaults (2 KV heads, head_dim 128, q/k/v biases, eos list, RoPE)
inline bool glm_family(Arch a) { return a == Arch::Glm || a == Arch::Glm4; }
// Whether a family's attention turns part of each head (partial_rotary_factor below 1: Phi-3, GLM, GLM-4), and
// its config class's default factor (GlmConfig's and Glm4Config's 0.5; 1 elsewhere)
bool takes_partial_rotary(Arch a);
double default_partial_rotary(Arch a);
// Granite's four scalars, as config.json names them
inline constexpr const char* kGraniteScalars[] = {"embedding_multiplier", "residual_multiplier",
                                                  "attention_multiplier", "logits_scaling"};
// The RoPE dict transformers reads: rope_scaling unless null or empty, else rope_parameters.
const char* rope_dict_key(const nlohmann::json& j);
// The sliding_window_pattern p that gives c's layers their kinds (sliding but on every p-th), or 0 where
// none does: the file's where it does, else 6 (Gemma3TextConfig's), else the smallest.
int64_t gemma3_window_pattern(const ModelConfig& c);

}  // namespace oomb::config_detail
