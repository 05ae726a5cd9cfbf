#include "backend/cpu/cpu_optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"

// Built with -O3 -fno-math-errno (sqrt vectorizes) and -ffp-contract=off (no FMAs, whatever -march
// says), see CMakeLists.txt: neither changes a result.
namespace oomb::cpu {

namespace {

// On x86-64 each loop is built for SSE2, AVX2 and AVX-512 and the widest the CPU has is chosen at
// load: the same IEEE operations lane by lane (sqrt and division correctly rounded at any width, no
// FMA), so the same bits; and the update runs at memory speed where SSE2's lanes bound it (the bf16
// image's packing above all). (The tests run the clone their machine picks; the others share
// their source and no operation whose result depends on the width.) GCC 12 names these levels.
// Not under ThreadSanitizer: the clones' resolvers run while the program is relocated, before its
// runtime starts, and its instrumentation of them crashes there (make test-tsan).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && !defined(__SANITIZE_THREAD__)
#define OOMB_WIDEST_SIMD __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define OOMB_WIDEST_SIMD
#endif

struct AdamWConsts {
  float step_size, inv_sqrt_bc2, b1, b2, c1, c2, decay, eps;
};

AdamWConsts adamw_consts(const Backend::AdamW& a) {
  const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
  const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
  return {float(a.lr / bc1), float(1.0 / std::sqrt(bc2)), a.beta1, a.beta2, 1.0f - a.beta1, 1.0f - a.beta2,
          a.lr * a.weight_decay, a.eps};
}

// An element's new weight pi written beside p: its image, as the update's out asks.
enum class Image { None, F32, BF16 };
template <Image I>
inline void put(void* image, int64_t i, float pi) {
  if constexpr (I == Image::F32) static_cast<float*>(image)[i] = pi;
  if constexpr (I == Image::BF16) static_cast<uint16_t*>(image)[i] = f32_to_bf16(pi);
}

// g is written only with a clip or a zero (adamw and sgd below pass a const g as these)
template <bool Clip, Image I, bool Zero>
OOMB_WIDEST_SIMD void adamw_loop(float* __restrict p, float* __restrict g, float* __restrict m, float* __restrict v,
                                 int64_t n, const AdamWConsts k, float clip, void* __restrict image) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    if constexpr (Clip) gi *= clip;
    if constexpr (Clip || Zero) g[i] = Zero ? 0.0f : gi;
    const float mi = k.b1 * m[i] + k.c1 * gi;
    const float vi = k.b2 * v[i] + k.c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float pi = p[i];
    pi -= k.decay * pi;
    pi -= k.step_size * mi / (std::sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
    p[i] = pi;
    put<I>(image, i, pi);
  }
}

template <bool Clip, Image I, bool Zero>
OOMB_WIDEST_SIMD void sgd_loop(float* __restrict p, float* __restrict g, int64_t n, float lr, float clip,
                               void* __restrict image) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    if constexpr (Clip) gi *= clip;
    if constexpr (Clip || Zero) g[i] = Zero ? 0.0f : gi;
    const float pi = p[i] - lr * gi;
    p[i] = pi;
    put<I>(image, i, pi);
  }
}

// sum of x[i]^2 over [a, b) in double, in 8 lanes (lane j: the i = j mod 8 in order), then the
// lanes in order: the same bits at any SIMD width, and 8 independent sums to fill the lanes
OOMB_WIDEST_SIMD double sum_squares_lanes(const float* __restrict x, int64_t a, int64_t b) {
  double lane[8] = {};
  int64_t i = a;
  for (; i + 8 <= b; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
  for (int j = 0; i < b; ++i, ++j) lane[j] += double(x[i]) * double(x[i]);
  double s = 0;
  for (const double l : lane) s += l;
  return s;
}

OOMB_WIDEST_SIMD void bf16_loop(const float* __restrict x, uint16_t* __restrict y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

// loop.template operator()<clip, image, zero>() for out's choices: the loop's instance for them
template <class Loop>
void dispatch(const UpdateOut& out, const Loop& loop) {
  const Image img = !out.image ? Image::None : out.image_bf16 ? Image::BF16 : Image::F32;
  const auto with_zero = [&]<bool C, Image I>() {
    if (out.zero_grad)
      loop.template operator()<C, I, true>();
    else
      loop.template operator()<C, I, false>();
  };
  const auto with_image = [&]<bool C>() {
    if (img == Image::None) with_zero.template operator()<C, Image::None>();
    if (img == Image::F32) with_zero.template operator()<C, Image::F32>();
    if (img == Image::BF16) with_zero.template operator()<C, Image::BF16>();
  };
  if (out.clip != 1.0f)
    with_image.template operator()<true>();
  else
    with_image.template operator()<false>();
}

}  // namespace

void adamw(float* p, const float* g, float* m, float* v, int64_t n, const Backend::AdamW& a) {
  adamw_loop<false, Image::None, false>(p, const_cast<float*>(g), m, v, n, adamw_consts(a), 1.0f, nullptr);
}

void sgd(float* p, const float* g, int64_t n, float lr) {
  sgd_loop<false, Image::None, false>(p, const_cast<float*>(g), n, lr, 1.0f, nullptr);
}

void cast_to_bf16(const float* x, uint16_t* y, int64_t n) { bf16_loop(x, y, n); }

double sum_squares(const float* x, int64_t n) {
  constexpr int64_t chunk = 1 << 16;  // fixed chunks: the sum does not depend on the thread count
  const int64_t nc = (n + chunk - 1) / chunk;
  std::vector<double> part(size_t(nc), 0.0);
#pragma omp parallel for if (nc > 1)
  for (int64_t c = 0; c < nc; ++c) part[size_t(c)] = sum_squares_lanes(x, c * chunk, std::min(n, (c + 1) * chunk));
  double s = 0;
  for (const double p : part) s += p;
  return s;
}

void adamw_update(float* p, float* g, float* m, float* v, int64_t n, const Backend::AdamW& a, const UpdateOut& out) {
  const AdamWConsts k = adamw_consts(a);
  dispatch(out, [&]<bool C, Image I, bool Z>() { adamw_loop<C, I, Z>(p, g, m, v, n, k, out.clip, out.image); });
}

void sgd_update(float* p, float* g, int64_t n, float lr, const UpdateOut& out) {
  dispatch(out, [&]<bool C, Image I, bool Z>() { sgd_loop<C, I, Z>(p, g, n, lr, out.clip, out.image); });
}

}  // namespace oomb::cpu
