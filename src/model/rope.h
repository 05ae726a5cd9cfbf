// RoPE's frequencies as transformers computes them (rope.cpp's header comment has the formulas).
#pragma once
#include <vector>

#include "hf/config.h"

namespace oomb {

// inv_freq (head_dim/2 values, fp32 as transformers keeps it) and the attention scaling of c.rope.
std::vector<float> rope_inv_freq(const ModelConfig& c, float* attention_scaling);

}  // namespace oomb
