#include "train/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace oomb {

int32_t sample_next(const float* logits, int64_t V, const SampleOptions& o, std::mt19937_64& rng) {
  OOMB_CHECK(V > 0, "sample: an empty vocabulary");
  OOMB_CHECK(o.temperature >= 0 && std::isfinite(o.temperature), "--temperature: must be finite and >= 0, got {}",
             o.temperature);
  OOMB_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p: must be in (0, 1], got {}", o.top_p);
  int64_t arg = 0;
  for (int64_t v = 1; v < V; ++v)
    if (logits[v] > logits[arg]) arg = v;
  if (o.temperature == 0) return int32_t(arg);
  // probabilities in float64, most likely first (ties: lower index first)
  std::vector<double> p(static_cast<size_t>(V));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += p[size_t(v)] = std::exp((double(logits[v]) - logits[arg]) / o.temperature);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  size_t keep = 0;
  double mass = 0;
  while (keep < order.size() && (keep == 0 || mass < o.top_p * sum)) mass += p[size_t(order[keep++])];
  double u = std::uniform_real_distribution<double>(0.0, mass)(rng);
  for (size_t i = 0; i < keep; ++i) {
    u -= p[size_t(order[i])];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace oomb
