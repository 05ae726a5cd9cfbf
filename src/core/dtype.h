// Storage dtypes and their conversions. Compute is fp32 on the CPU backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace oomb {

enum class DType : uint8_t { F32, BF16, F16, F64, I32, U32, I64 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);             // "f32", "bf16", ...
std::string_view dtype_safetensors_name(DType t);  // "F32", "BF16", ...
bool dtype_from_safetensors(std::string_view s, DType* out);
DType dtype_parse(std::string_view s);  // "f32"|"bf16"|"f16"|"float32"|...; throws naming s
bool dtype_is_float(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// round to nearest even; NaN stays NaN (quiet). No branch, so the loops over it vectorize.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
// Directed rounding to bf16 (NaN stays NaN): the largest bf16 <= f, and the smallest >= f.
inline uint16_t f32_to_bf16_down(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  const bool inexact = (u & 0xffffu) != 0, negative = (u >> 31) != 0;
  return uint16_t((u >> 16) + (inexact && negative ? 1 : 0));  // truncation rounds toward zero
}
inline uint16_t f32_to_bf16_up(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  const bool inexact = (u & 0xffffu) != 0, negative = (u >> 31) != 0;
  return uint16_t((u >> 16) + (inexact && !negative ? 1 : 0));
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of src (dtype st) to fp32.
void convert_to_f32(const void* src, DType st, float* dst, size_t n);
// Converts n fp32 elements to dtype dt.
void convert_from_f32(const float* src, void* dst, DType dt, size_t n);

}  // namespace oomb
