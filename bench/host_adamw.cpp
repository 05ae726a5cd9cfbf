// The host AdamW's throughput (parameters per second) on one core and on every core, beside the
// plain scalar loop the CPU backend ran before (one element at a time, OpenMP, no SIMD lanes); then
// --offload params's whole host update of a unit (the gradient clipped, AdamW, the new weights'
// bf16 image, the gradient zeroed) as one fused pass (cpu::adamw_update) beside the four passes
// it replaced; and the gradient norm's sum of squares, in 8 lanes beside one chain.
// Usage: oomb_bench_adamw [parameters, default 16M] [repeats, default 5]; prints one line per
// variant with the best of the repeats. Results go to docs/BENCHMARKS.md.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_optimizer.h"
#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"

using namespace oomb;

namespace {

// The CPU backend's loop before the vectorized cpu::adamw (kept here only to compare against).
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

// The host update before cpu::adamw_update: four passes, as the optimizer's thread and
// ParamStore::after_update ran them (Backend::scale's loop, the step, the image's cast, memset).
void four_passes(float* p, float* g, float* m, float* v, uint16_t* image, int64_t n, const Backend::AdamW& a,
                 float clip) {
#pragma omp parallel for if (n >= cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) g[i] *= clip;
  cpu::adamw(p, g, m, v, n, a);
#pragma omp parallel for if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) image[i] = f32_to_bf16(p[i]);
  std::memset(g, 0, size_t(n) * 4);
}

void fused(float* p, float* g, float* m, float* v, uint16_t* image, int64_t n, const Backend::AdamW& a, float clip) {
  cpu::adamw_update(p, g, m, v, n, a, {clip, image, true, true});
}

// The gradient norm's sum before cpu::sum_squares: one double chain per 64K chunk (each add waits
// for the last).
double one_chain(const float* x, int64_t n) {
  const int64_t chunk = 1 << 16, nc = (n + chunk - 1) / chunk;
  std::vector<double> part(size_t(nc), 0.0);
#pragma omp parallel for if (nc > 1)
  for (int64_t c = 0; c < nc; ++c) {
    double s = 0;
    for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) s += double(x[i]) * x[i];
    part[size_t(c)] = s;
  }
  double s = 0;
  for (const double q : part) s += q;
  return s;
}

double best_of(int reps, const std::function<void()>& prepare, const std::function<void(int)>& run) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    prepare();
    const auto t0 = std::chrono::steady_clock::now();
    run(r);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// one variant's line: its best time, parameters a second, and `bytes` a parameter as GB/s
void report(const char* name, int threads, double best, int64_t n, int bytes) {
  std::printf("%-24s %2d thread%s  %8.3f ms  %7.3f G params/s  %6.1f GB/s\n", name, threads, threads == 1 ? " " : "s",
              best * 1e3, double(n) / best / 1e9, double(n) * bytes / best / 1e9);
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
  const Variant variants[] = {{"host AdamW (cpu::adamw)", cpu::adamw}, {"scalar loop (before)", scalar_adamw}};
  std::printf("%lld parameters (%.0f MiB of weights, gradients and moments), best of %d\n", (long long)n,
              double(n) * 16 / (1 << 20), reps);
  for (const Variant& var : variants)
    for (const int threads : {1, all}) {
      omp_set_num_threads(threads);
      const double best = best_of(reps, [] {}, [&](int r) {
        var.fn(p.data(), g.data(), m.data(), v.data(), n, {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 1});
      });
      report(var.name, threads, best, n, 28);
    }
  // the whole update: bytes moved by the fused pass (p, g, m, v read; p, m, v, g written; the image)
  std::vector<uint16_t> image(static_cast<size_t>(n));
  using Update = void (*)(float*, float*, float*, float*, uint16_t*, int64_t, const Backend::AdamW&, float);
  const struct {
    const char* name;
    Update fn;
  } updates[] = {{"host update, fused", fused}, {"host update, 4 passes", four_passes}};
  std::printf("the host update (clip 0.5, AdamW, bf16 image, gradients zeroed); GB/s counts the fused pass's 34 bytes\n");
  for (const auto& u : updates)
    for (const int threads : {1, all}) {
      omp_set_num_threads(threads);
      const double best = best_of(reps, [&] { std::fill(g.begin(), g.end(), 0.01f); }, [&](int r) {
        u.fn(p.data(), g.data(), m.data(), v.data(), image.data(), n, {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 1}, 0.5f);
      });
      report(u.name, threads, best, n, 34);
    }
  const struct {
    const char* name;
    double (*fn)(const float*, int64_t);
  } norms[] = {{"norm, 8 lanes", cpu::sum_squares}, {"norm, one chain (before)", one_chain}};
  std::printf("the gradient norm's sum of squares (4 bytes a parameter)\n");
  for (const auto& q : norms)
    for (const int threads : {1, all}) {
      omp_set_num_threads(threads);
      volatile double sink = 0;
      const double best = best_of(reps, [] {}, [&](int) { sink = q.fn(g.data(), n); });
      report(q.name, threads, best, n, 4);
    }
  return 0;
}
