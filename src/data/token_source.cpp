#include "data/token_source.h"

#include <algorithm>
#include <vector>

namespace oomb {

int64_t TokenSource::targets_in(int64_t w, int64_t N, int32_t sep) {
  const int64_t block = std::min<int64_t>(N, 1 << 16);
  std::vector<int32_t> ids(static_cast<size_t>(block)), targets(static_cast<size_t>(block));
  int64_t count = 0;
  for (int64_t t0 = 0; t0 < N; t0 += block) {
    const int64_t n = std::min(block, N - t0);
    read(w, N, t0, n, ids.data(), targets.data());
    for (int64_t i = 0; i < n; ++i) count += counted_target(ids[size_t(i)], targets[size_t(i)], sep);
  }
  return count;
}

}  // namespace oomb
