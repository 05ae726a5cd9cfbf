// AdamW (and SGD) over flat fp32 arrays on the host CPU: the CPU backend's update, and the host optimizer's
// when --offload params keeps the masters and moments in host memory. Vectorized (SIMD lanes) and
// split over every core (OpenMP); each element's arithmetic is the same sequence of IEEE
// operations as the CUDA kernel's (kernels_basic.cu, no contraction into FMAs), so every backend's
// update gives the same bits.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace oomb::cpu {

// p -= lr * wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps);   all (n) fp32, none aliasing another
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const Backend::AdamW& a);
// p -= lr * g (n), the product rounded before the difference, as the CUDA kernel's
void sgd(float* p, const float* g, int64_t n, float lr);

}  // namespace oomb::cpu
