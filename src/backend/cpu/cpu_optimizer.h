// The optimizer's loops over flat fp32 arrays on the host CPU: AdamW and SGD (the CPU backend's
// update, and the host optimizer's when --offload params keeps the masters and moments in host
// memory), the host update fused into one pass, the bf16 images' cast and the gradient norm's sum.
// Vectorized (SIMD lanes, the widest the CPU has) and split over every core (OpenMP); each
// element's arithmetic is the same sequence of IEEE operations as the CUDA kernel's
// (kernels_basic.cu, no contraction into FMAs), so every backend's update gives the same bits.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace oomb::cpu {

// p -= lr * wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps);   all (n) fp32, none aliasing another
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const Backend::AdamW& a);
// p -= lr * g (n), the product rounded before the difference, as the CUDA kernel's
void sgd(float* p, const float* g, int64_t n, float lr);

// y = x rounded to bf16 (n), core/dtype's f32_to_bf16 element by element, every core and SIMD lane
void cast_to_bf16(const float* x, uint16_t* y, int64_t n);

// sum of x[i]^2 (n) in double, for the gradient's norm: in fixed chunks of 64K, each summed in 8
// lanes (the i = j mod 8 in order, then the lanes in order), the chunks in order; the same bits on
// any thread count and SIMD width
double sum_squares(const float* x, int64_t n);

// The host update of --offload params in one pass over memory, where it had been four (the
// gradient's clip scale, the step, the new weights' image, the gradient zeroed): each element's
// bits as those passes give them (Backend::scale, adamw or sgd above, core/dtype's f32_to_bf16).
struct UpdateOut {
  float clip = 1.0f;          // g *= clip first (1: g as it is)
  void* image = nullptr;      // the new p's copy, (n) bf16 (image_bf16) or fp32; null: none
  bool image_bf16 = false;
  bool zero_grad = false;     // g left zero; else the scaled g stays in it, as Backend::scale leaves it
};
void adamw_update(float* p, float* g, float* m, float* v, int64_t n, const Backend::AdamW& a, const UpdateOut& out);
void sgd_update(float* p, float* g, int64_t n, float lr, const UpdateOut& out);

}  // namespace oomb::cpu
