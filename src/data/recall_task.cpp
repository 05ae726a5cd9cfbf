#include "data/recall_task.h"

#include <algorithm>
#include <fmt/format.h>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"

namespace oomb {

RecallTask::RecallTask(uint64_t seed, int64_t pairs, int64_t keys, int64_t values)
    : seed_(seed), pairs_(pairs), keys_(keys), values_(values) {
  OOMB_CHECK(pairs > 0 && pairs <= keys, "recall task: {} pairs need at least as many keys ({})", pairs, keys);
}

std::string RecallTask::describe() const {
  return fmt::format("generated key/value recall: {} pairs planted at the start, queried at the end", pairs_);
}

// Layout of one window of N tokens:
//   k1 v1 k2 v2 ... kP vP | filler ... | 0 ka va 0 kb vb ... (every pair queried once, shuffled)
// Targets are the values after each queried key; everything else is ignored (-1).
void RecallTask::window(int64_t w, int64_t N, int32_t* ids, int32_t* targets) {
  OOMB_CHECK(N >= min_length(), "recall task: sequence length {} is below its minimum {}", N, min_length());
  std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ull + uint64_t(w));
  std::vector<int32_t> keys(static_cast<size_t>(keys_));
  std::iota(keys.begin(), keys.end(), 16);
  std::shuffle(keys.begin(), keys.end(), rng);
  std::vector<int32_t> vals(static_cast<size_t>(pairs_));
  for (auto& v : vals) v = int32_t(16 + keys_ + int64_t(rng() % uint64_t(values_)));
  std::fill_n(targets, N, -1);
  int64_t t = 0;
  for (int64_t p = 0; p < pairs_; ++p) {
    ids[t++] = keys[size_t(p)];
    ids[t++] = vals[size_t(p)];
  }
  const int64_t query_start = N - 3 * pairs_;
  while (t < query_start) ids[t++] = int32_t(1 + rng() % 15);
  std::vector<int64_t> order(static_cast<size_t>(pairs_));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t p : order) {
    ids[t++] = 0;
    ids[t] = keys[size_t(p)];
    targets[t++] = vals[size_t(p)];  // at the key, predict its value
    ids[t++] = vals[size_t(p)];
  }
}

}  // namespace oomb
