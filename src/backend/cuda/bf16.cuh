// f32 <-> bf16 in device code with core/dtype.h's bit arithmetic (round to nearest even, NaN kept
// quiet): the CPU's bits exactly.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace oomb::cuda::k {

__device__ inline uint16_t to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ inline float from_bf16(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

}  // namespace oomb::cuda::k
