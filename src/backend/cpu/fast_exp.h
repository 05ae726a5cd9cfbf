// exp(x) for float32 without branches, so loops over it vectorize (#pragma omp simd).
// Cephes' expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial, times 2^n built in the
// exponent bits. Relative error about 1 ulp; exp(x) = 0 for x < -87.3 (where exp underflows anyway).
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>

namespace oomb::cpu {

inline float exp_fast(float x) {
  const float xc = std::min(std::max(x, -87.3f), 88.3f);
  const float t = xc * 1.44269504088896341f;
  int32_t n = int32_t(t);  // truncation, then floor for negatives
  n -= float(n) > t ? 1 : 0;
  const float fn = float(n);
  const float r = xc - fn * 0.693359375f + fn * 2.12194440e-4f;
  const float r2 = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r2 + r + 1.0f;
  const float scale = std::bit_cast<float>((n + 127) << 23);
  return x < -87.3f ? 0.0f : y * scale;
}

}  // namespace oomb::cpu
