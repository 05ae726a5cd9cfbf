#include "data/repeat_task.h"

#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

RepeatTask::RepeatTask(uint64_t seed, int64_t vocab) : seed_(seed), vocab_(vocab) {
  OOMB_CHECK(vocab >= 2, "repeat task: vocabulary must have at least 2 tokens, got {}", vocab);
}

std::string RepeatTask::describe() const {
  return fmt::format("generated long-range repeat task over {} tokens", vocab_);
}

// Window of N tokens: x_0 .. x_{h-1} random, then x_t = x_{t-h} for t >= h (h = ceil(N/2)).
// Targets: x_{t+1} for t >= h, ignored (-1) before. Each token is a hash of (seed, window, position),
// so any range can be produced without holding the window.
void RepeatTask::read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) {
  OOMB_CHECK(N >= 2, "repeat task: sequence length must be at least 2, got {}", N);
  const int64_t h = (N + 1) / 2;
  auto token = [&](int64_t t) {
    uint64_t x = seed_ * 0x9e3779b97f4a7c15ull ^ (uint64_t(w) << 32) ^ uint64_t(t < h ? t : t - h);
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
    return int32_t(x % uint64_t(vocab_));
  };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    ids[i] = token(t);
    targets[i] = t >= h ? token(t + 1) : -1;
  }
}

}  // namespace oomb
