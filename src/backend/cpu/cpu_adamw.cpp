#include "backend/cpu/cpu_adamw.h"

#include <cmath>

#include "backend/cpu/cpu_ops.h"

// Built with -O3 -fno-math-errno (sqrt vectorizes) and -ffp-contract=off (no FMAs, whatever -march
// says), see CMakeLists.txt: neither changes a result.
namespace oomb::cpu {

void adamw(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
           const Backend::AdamW& a) {
  const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
  const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
  const float step_size = float(a.lr / bc1), inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  const float b1 = a.beta1, b2 = a.beta2, c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2;
  const float decay = a.lr * a.weight_decay, eps = a.eps;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float pi = p[i];
    pi -= decay * pi;
    pi -= step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    p[i] = pi;
  }
}

void sgd(float* __restrict p, const float* __restrict g, int64_t n, float lr) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] -= lr * g[i];
}

}  // namespace oomb::cpu
