// RoPE's frequencies as transformers computes them (rope.cpp's header comment has the formulas).
#pragma once
#include <cstdint>
#include <vector>

#include "hf/config.h"

namespace oomb {

// The dims of each head RoPE turns, as transformers counts them: int(head_dim * partial_rotary_factor)
// (the first ones; the rest pass through). head_dim unless the config rotates part of a head.
int64_t rope_dim(int64_t head_dim, double partial_rotary_factor);
inline int64_t rope_dim(const ModelConfig& c) { return rope_dim(c.head_dim, c.rope.partial_rotary_factor); }

// inv_freq (rope_dim/2 values, fp32 as transformers keeps it) and the attention scaling of c.rope, for
// a sequence of `length` positions (0: not known). Only longrope depends on it: its long factors past
// rope_switch_length(c), its short ones up to it (and for 0, as transformers' initial buffer).
std::vector<float> rope_inv_freq(const ModelConfig& c, float* attention_scaling, int64_t length = 0);

// The plain RoPE of c's rope_theta (OLMo 3's and Gemma 3's sliding_rope_theta where set) over the same dims (rope_type
// default, attention scaling 1): the table of a layer that does not take the configured scaling
// (ModelConfig::rope_scaled).
std::vector<float> rope_inv_freq_plain(const ModelConfig& c);

// longrope: the longest sequence its short factors serve (transformers: seq_len = max(position_ids) + 1
// above it takes the long ones): its original_max_position_embeddings. 0 for every other rope_type (one
// table at any length).
int64_t rope_switch_length(const ModelConfig& c);

}  // namespace oomb
