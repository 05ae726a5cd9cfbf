// The MLP's gate activation: SiLU (Llama and its kin, SwiGLU), or GELU's tanh approximation (Gemma 3's
// gelu_pytorch_tanh, GeGLU).
#pragma once
#include <cstdint>

namespace oomb {

enum class Act : uint8_t { Silu, GeluTanh };

}  // namespace oomb
