#include "train/flops.h"

namespace oomb {

int64_t linear_weights(const ModelConfig& c) {
  const int64_t d = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, I = c.intermediate;
  const int64_t per_layer = d * q + 2 * d * kv + q * d + 3 * d * I;
  return c.layers * per_layer + c.vocab * d;  // lm_head counts even when tied to the embedding
}

double train_flops(const ModelConfig& c, int64_t N) {
  const double n = double(N);
  const double fwd = 2.0 * n * double(linear_weights(c)) +
                     4.0 * double(c.layers) * double(c.heads) * double(c.head_dim) * n * (n + 1.0) / 2.0;
  return 3.0 * fwd;
}

}  // namespace oomb
