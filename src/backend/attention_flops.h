// The arithmetic an attention call does, for rates (OOMB_CUDA_PROFILE's TFLOP/s): the (query, key)
// pairs it may see by position (causal, sliding window, each block's kv-head mask), times 4 D per
// pair forward (Q K^T and P V) and 10 D backward (Q K^T, dO V^T, dV, dK, dq: 2.5 x the forward, as
// FlashAttention counts). Document masks are not taken off (as train/flops.h), nor a kernel's own
// recomputation (the tensor-core backward's S in both of its passes).
#pragma once
#include <cstdint>
#include <span>

#include "backend/backend.h"

namespace oomb {

// Pairs (i, j) with queries i in [q0, q0 + T) and keys j in [k0, k0 + len): j <= i, and when
// window > 0, j > i - window.
int64_t visible_pairs(int64_t q0, int64_t T, int64_t k0, int64_t len, int64_t window);

// FLOPs of attention_fwd (backward: attention_bwd) of T queries of H heads of dim D over the blocks.
double attention_flops(const AttnArgs& a, int64_t T, int64_t H, int64_t D, std::span<const KVBlock> blocks,
                       bool backward);

}  // namespace oomb
