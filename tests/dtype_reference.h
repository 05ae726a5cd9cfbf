// An independent reference for the bf16 and f16 formats, written from the IEEE 754 definitions with
// integer fields and float64 arithmetic: it shares no code (and no bit tricks) with core/dtype.*, so a
// conversion bug there cannot also hide here. Used by test_dtype, test_safetensors and test_cuda_ops.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace oomb::testing::ref {

// The value a 16-bit pattern encodes, in float64 (exact: both formats are subsets of float64).
// bf16: 1 sign, 8 exponent bits (bias 127), 7 fraction bits. f16: 1 sign, 5 exponent bits (bias 15), 10 fraction bits.
inline double half_value(uint16_t h, int exp_bits, int frac_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t e = (uint32_t(h) >> frac_bits) & ((1u << exp_bits) - 1), m = h & ((1u << frac_bits) - 1);
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == (1u << exp_bits) - 1)
    return m ? std::copysign(std::numeric_limits<double>::quiet_NaN(), s) : s * std::numeric_limits<double>::infinity();
  if (e == 0) return s * std::ldexp(double(m), 1 - bias - frac_bits);                            // subnormal
  return s * std::ldexp(double((1u << frac_bits) + m), int(e) - bias - frac_bits);               // normal
}
inline double bf16_value(uint16_t h) { return half_value(h, 8, 7); }
inline double f16_value(uint16_t h) { return half_value(h, 5, 10); }

// Round-to-nearest-even encoding of x, by bisection over the (monotonic) positive patterns and an exact
// float64 comparison of the distances to the two neighbours. The infinity pattern counts as the
// value one ulp above the largest finite one (2^128 for bf16, 2^16 for f16), which is what IEEE's
// overflow rule amounts to: at least max + ulp/2 rounds to infinity (a tie goes to the even pattern,
// the infinity). NaN gives the canonical quiet NaN 0x7fc0 / 0x7e00 with x's sign (callers that accept
// any NaN test with is_nan_pattern).
inline uint16_t half_encode(float x, int exp_bits, int frac_bits) {
  const uint16_t inf = uint16_t(((1u << exp_bits) - 1) << frac_bits);
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return uint16_t(sign | inf | (1u << (frac_bits - 1)));
  const int bias = (1 << (exp_bits - 1)) - 1;
  const double inf_as = std::ldexp(1.0, bias + 1);
  auto val = [&](uint32_t p) { return p == inf ? inf_as : half_value(uint16_t(p), exp_bits, frac_bits); };
  const double a = std::fabs(double(x));
  if (a >= inf_as) return sign | inf;
  uint32_t lo = 0, hi = inf;  // val(lo) <= a < val(hi)
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    (val(mid) <= a ? lo : hi) = mid;
  }
  const double dlo = a - val(lo), dhi = val(hi) - a;  // exact: x and both neighbours are float32 values
  const uint32_t p = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  return uint16_t(sign | p);
}
inline uint16_t bf16_encode(float x) { return half_encode(x, 8, 7); }
inline uint16_t f16_encode(float x) { return half_encode(x, 5, 10); }
inline bool is_nan_pattern(uint16_t h, int exp_bits, int frac_bits) {
  const uint32_t e = (uint32_t(h) >> frac_bits) & ((1u << exp_bits) - 1);
  return e == (1u << exp_bits) - 1 && (h & ((1u << frac_bits) - 1)) != 0;
}

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// float32 inputs that exercise both encoders: named special values (ties to even both ways, the
// subnormal ranges, the overflow thresholds, NaN, +-0, +-inf), every 16-bit top half with the low
// halves that sit on, just below and just above the bf16 rounding point, the f16 rounding points of
// every top-19-bit pattern, the f16 subnormal rounding points of every exponent that reaches them,
// and `n_random` random bit patterns.
inline std::vector<float> encode_inputs(size_t n_random, bool f16_grid = true) {
  const float named[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, -NAN,
                         from_bits(0x7f800001u),  // signalling NaN
                         from_bits(0xffc12345u), std::numeric_limits<float>::min(),
                         std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                         std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                         1.00390625f,              // 1 + 2^-8: a bf16 tie, rounds down to even 1.0
                         1.01171875f,              // 1 + 3 * 2^-8: a bf16 tie, rounds up to even 1 + 2^-6
                         -1.00390625f, -1.01171875f,
                         from_bits(0x7f7f8000u),   // halfway between bf16's max and 2^128: rounds to inf
                         from_bits(0x7f7f7fffu),   // just below: bf16's max
                         from_bits(0x00008000u), from_bits(0x00018000u),  // bf16 ties among f32 subnormals
                         float(1.0 + std::ldexp(1.0, -11)), float(1.0 + 3 * std::ldexp(1.0, -11)),  // f16 ties
                         65504.0f, 65519.0f, 65519.996f, 65520.0f, -65520.0f, 65536.0f, 1e30f,  // f16 overflow edge
                         float(std::ldexp(1.0, -24)), float(std::ldexp(1.0, -25)),  // f16 min subnormal; tie to 0
                         float(3 * std::ldexp(1.0, -25)), float(std::ldexp(1.0, -26)),
                         float(std::ldexp(1.0, -14)), float(std::ldexp(1.0, -14) - std::ldexp(1.0, -25)),
                         float(std::ldexp(1.0, -14) - std::ldexp(1.0, -24)), 1e-40f, -1e-40f, 0.1f, 1.0f / 3};
  std::vector<float> v(std::begin(named), std::end(named));
  for (uint32_t hi = 0; hi < 65536; ++hi)  // bf16: the rounding point is bit 15
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) v.push_back(from_bits(hi << 16 | lo));
  if (f16_grid) {
    for (uint32_t hi = 0; hi < (1u << 19); ++hi)  // f16 normals: the rounding point is bit 12
      for (uint32_t lo : {0x0000u, 0x0fffu, 0x1000u, 0x1001u}) v.push_back(from_bits(hi << 13 | lo));
    // f16 subnormals (|x| < 2^-14): the rounding point moves up one bit per binade down to 2^-25
    for (uint32_t s : {0u, 1u})
      for (uint32_t E = 101; E <= 112; ++E) {
        const uint32_t drop = std::min(126 - E, 24u);  // fraction bits below the f16 subnormal ulp 2^-24
        const uint32_t keep = drop >= 23 ? 0 : 23 - drop;
        const uint32_t tie = drop >= 24 ? 0 : 1u << (drop - 1);
        for (uint32_t k = 0; k < (1u << keep); ++k)
          for (uint32_t lo : {0u, tie, tie - 1, tie + 1, 2 * tie - 1}) {
            const uint32_t frac = ((k << drop) | (lo & ((1u << std::min(drop, 23u)) - 1))) & 0x7fffffu;
            v.push_back(from_bits(s << 31 | E << 23 | frac));
          }
      }
  }
  std::mt19937 g(20240617);
  for (size_t i = 0; i < n_random; ++i) v.push_back(from_bits(uint32_t(g())));
  return v;
}

}  // namespace oomb::testing::ref
