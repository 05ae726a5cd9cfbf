#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace oomb {

namespace {
struct Info {
  DType t;
  size_t size;
  std::string_view name, st_name;
};
constexpr Info kInfo[] = {
    {DType::F32, 4, "f32", "F32"},  {DType::BF16, 2, "bf16", "BF16"}, {DType::F16, 2, "f16", "F16"},
    {DType::F64, 8, "f64", "F64"},  {DType::I32, 4, "i32", "I32"},   {DType::U32, 4, "u32", "U32"},
    {DType::I64, 8, "i64", "I64"},
};
const Info& info(DType t) { return kInfo[static_cast<int>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
std::string_view dtype_safetensors_name(DType t) { return info(t).st_name; }
bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64;
}

bool dtype_from_safetensors(std::string_view s, DType* out) {
  for (const Info& i : kInfo)
    if (i.st_name == s) {
      *out = i.t;
      return true;
    }
  return false;
}

DType dtype_parse(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::F16;
  fail("unknown dtype '{}' (expected f32, bf16 or f16)", s);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(float(man), -24);
    return sign ? -f : f;
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00;              // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00;             // overflow -> inf
  if (absu < 0x38800000u) {                                   // subnormal or zero
    float a;
    std::memcpy(&a, &absu, 4);
    return sign | uint16_t(std::nearbyint(a * 16777216.0f));  // a / 2^-24, round-even
  }
  uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);
  return sign | uint16_t((r - 0x38000000u) >> 13);
}

void convert_to_f32(const void* src, DType st, float* dst, size_t n) {
  switch (st) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      auto s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      auto s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::F64: {
      auto s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    default: fail("convert_to_f32: dtype {} is not a float type", dtype_name(st));
  }
}

void convert_from_f32(const float* src, void* dst, DType dt, size_t n) {
  switch (dt) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      auto d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::F64: {
      auto d = static_cast<double*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = src[i];
      return;
    }
    default: fail("convert_from_f32: dtype {} is not a float type", dtype_name(dt));
  }
}

}  // namespace oomb
