// The host AdamW's throughput (parameters per second) on one core and on every core, beside the
// plain scalar loop the CPU backend ran before (one element at a time, OpenMP, no SIMD lanes).
// Usage: oomb_bench_adamw [parameters, default 16M] [repeats, default 5]; prints one line per
// variant with the best of the repeats. Results go to docs/BENCHMARKS.md.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_adamw.h"

using namespace oomb;

namespace {

// The CPU backend's loop before cpu_adamw.cpp (kept here only to compare against).
void scalar_adamw(float* p, const float* g, float* m, float* v, int64_t n, const Backend::AdamW& a) {
  const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
  const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
  const float step_size = float(a.lr / bc1), inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float& mi = m[i];
    float& vi = v[i];
    mi = a.beta1 * mi + (1.0f - a.beta1) * gi;
    vi = a.beta2 * vi + (1.0f - a.beta2) * gi * gi;
    float& pi = p[i];
    pi -= a.lr * a.weight_decay * pi;
    pi -= step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + a.eps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t(16) << 20;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<float> p(size_t(n), 0.5f), g(size_t(n), 0.01f), m(size_t(n), 0.0f), v(size_t(n), 0.0f);
  const int all = omp_get_max_threads();
  using Fn = std::function<void(float*, const float*, float*, float*, int64_t, const Backend::AdamW&)>;
  struct Variant {
    const char* name;
    Fn fn;
  };
  const Variant variants[] = {{"host AdamW (cpu_adamw)", cpu::adamw}, {"scalar loop (before)", scalar_adamw}};
  std::printf("%lld parameters (%.0f MiB of weights, gradients and moments), best of %d\n", (long long)n,
              double(n) * 16 / (1 << 20), reps);
  for (const Variant& var : variants)
    for (const int threads : {1, all}) {
      omp_set_num_threads(threads);
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        const Backend::AdamW a{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 1};
        const auto t0 = std::chrono::steady_clock::now();
        var.fn(p.data(), g.data(), m.data(), v.data(), n, a);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%-24s %2d thread%s  %8.3f ms  %7.3f G params/s  %6.1f GB/s\n", var.name, threads,
                  threads == 1 ? " " : "s", best * 1e3, double(n) / best / 1e9, double(n) * 28 / best / 1e9);
    }
  return 0;
}
