// f32 <-> bf16 conversions: the same bit arithmetic as core/dtype.h (round to nearest even, NaN
// kept quiet), so CUDA and CPU give identical bits.
#include "backend/cuda/kernels.h"

namespace oomb::cuda::k {

namespace {

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

__device__ inline uint16_t to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ inline float from_bf16(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

// x, y: (n)
__global__ void f32_to_bf16_k(const float* x, uint16_t* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = to_bf16(x[i]);
}
__global__ void bf16_to_f32_k(const uint16_t* x, float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = from_bf16(x[i]);
}
__global__ void round_bf16_k(float* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = from_bf16(to_bf16(x[i]));
}

}  // namespace

void cast(const void* x, bool x_bf16, void* y, bool y_bf16, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  if (x_bf16 == y_bf16) {
    if (x != y) cudaMemcpyAsync(y, x, size_t(n) * (x_bf16 ? 2 : 4), cudaMemcpyDeviceToDevice, s);
  } else if (x_bf16) {
    bf16_to_f32_k<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<float*>(y), n);
  } else {
    f32_to_bf16_k<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(x), static_cast<uint16_t*>(y), n);
  }
}

void round_bf16(float* x, int64_t n, cudaStream_t s) {
  if (n > 0) round_bf16_k<<<blocks_for(n), kThreads, 0, s>>>(x, n);
}

}  // namespace oomb::cuda::k
