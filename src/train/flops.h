// Model FLOPs of training, for throughput and MFU: what the model needs, not what oomb spends
// (the recomputation of the backward sweep is not counted).
//   forward FLOPs of one sequence of N tokens =
//       2 N (weights of every linear layer: q, k, v, o, gate, up, down per layer, and lm_head)
//     + 4 L H D N (N + 1) / 2            (causal attention: Q K^T and P V over the N (N + 1) / 2 visible pairs)
//   training = 3 x forward (backward twice the forward). Embedding lookups, norms, RoPE, the
//   softmax and the optimizer are not counted. Document masks are not taken off.
#pragma once
#include <cstdint>

#include "hf/config.h"

namespace oomb {

int64_t linear_weights(const ModelConfig& c);        // matrix elements of all linear layers and lm_head
double train_flops(const ModelConfig& c, int64_t N);  // one sequence of N tokens, forward + backward

}  // namespace oomb
