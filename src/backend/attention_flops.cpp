#include "backend/attention_flops.h"

#include <algorithm>

namespace oomb {

namespace {

// sum over x <= hi of the number of keys of [k0, k0 + len) at or below x
int64_t keys_at_or_below_summed(int64_t hi, int64_t k0, int64_t len) {
  if (hi < k0) return 0;
  const int64_t m = std::min(hi - k0 + 1, len);  // x in [k0, k0 + m): 1, 2, .., m keys
  return m * (m + 1) / 2 + (hi - k0 + 1 - m) * len;  // then len keys for every later x
}
// sum over x in [lo, hi] of the keys at or below x
int64_t summed(int64_t lo, int64_t hi, int64_t k0, int64_t len) {
  return keys_at_or_below_summed(hi, k0, len) - keys_at_or_below_summed(lo - 1, k0, len);
}

}  // namespace

int64_t visible_pairs(int64_t q0, int64_t T, int64_t k0, int64_t len, int64_t window) {
  if (T <= 0 || len <= 0) return 0;
  const int64_t last = q0 + T - 1;
  int64_t n = summed(q0, last, k0, len);                      // keys j <= i
  if (window > 0) n -= summed(q0 - window, last - window, k0, len);  // less keys j <= i - window
  return n;
}

double attention_flops(const AttnArgs& a, int64_t T, int64_t H, int64_t D, std::span<const KVBlock> blocks,
                       bool backward) {
  double pairs = 0;  // summed over the query heads
  for (const KVBlock& b : blocks) {
    const int64_t G = b.k.dim(1), per_group = G > 0 ? H / G : 0;
    int64_t groups = G;  // the kv heads whose query heads read this block
    if (~b.heads != 0) {
      groups = 0;
      for (int64_t g = 0; g < G; ++g) groups += g >= 64 || ((b.heads >> g) & 1) ? 1 : 0;
    }
    pairs += double(visible_pairs(a.q_idx0, T, b.idx0, b.k.dim(0), a.window)) * double(groups * per_group);
  }
  return pairs * double(D) * (backward ? 10.0 : 4.0);
}

}  // namespace oomb
