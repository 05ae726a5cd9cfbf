#include "data/repeat_task.h"

#include <algorithm>
#include <fmt/format.h>
#include <random>
#include <vector>

#include "core/error.h"

namespace oomb {

RepeatTask::RepeatTask(uint64_t seed, int64_t vocab) : seed_(seed), vocab_(vocab) {
  OOMB_CHECK(vocab >= 2, "repeat task: vocabulary must have at least 2 tokens, got {}", vocab);
}

std::string RepeatTask::describe() const {
  return fmt::format("generated long-range repeat task over {} tokens", vocab_);
}

// Window of N tokens: x_0 .. x_{h-1} random, then x_t = x_{t-h} for t >= h (h = ceil(N/2)).
// Targets: x_{t+1} for t >= h, ignored (-1) before.
void RepeatTask::window(int64_t w, int64_t N, int32_t* ids, int32_t* targets) {
  OOMB_CHECK(N >= 2, "repeat task: sequence length must be at least 2, got {}", N);
  std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ull + uint64_t(w));
  const int64_t h = (N + 1) / 2;
  std::vector<int32_t> seq(static_cast<size_t>(N + 1));
  for (int64_t t = 0; t <= N; ++t) seq[size_t(t)] = t < h ? int32_t(rng() % uint64_t(vocab_)) : seq[size_t(t - h)];
  for (int64_t t = 0; t < N; ++t) {
    ids[t] = seq[size_t(t)];
    targets[t] = t >= h ? seq[size_t(t + 1)] : -1;
  }
}

}  // namespace oomb
