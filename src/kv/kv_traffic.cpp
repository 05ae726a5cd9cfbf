#include "kv/kv_traffic.h"

#include <algorithm>

namespace oomb {

namespace {
using i128 = __int128;  // sums of N^2 / C rows overflow 64 bits for absurd plans: checked at the end
constexpr int64_t kMostSteps = int64_t(1) << 26;  // chunks x layers counted one by one
}  // namespace

KVTrafficPlan plan_kv_traffic(const KVCacheOptions& o, const SparseOptions& sparse, int64_t N, int64_t C,
                              bool layer_order, bool keep) {
  KVTrafficPlan r;
  if (!o.offload || N <= 0) return r;
  OOMB_CHECK(C > 0, "--chunk-size: must be positive, got {}", C);
  const int64_t L = o.kv.layers, P = o.kv.page_size, T = (N + C - 1) / C;
  const i128 kv_row = 2 * i128(o.kv.row_bytes()), grad_row = 2 * i128(o.grad.row_bytes());  // K and V
  const bool reads_last = layer_order || sparse.on();
  i128 kv_in = 0, grads_in = 0, grads_out = 0;
  // (the model's last layer: the cache's last head_chunks layers, --sp-head-chunks)
  auto reads = [&](int64_t l) { return keep ? 2 : (l + o.head_chunks < L || reads_last ? 1 : 0) + 2; };
  bool windows = false;
  for (int64_t l = 0; l < L; ++l) windows = windows || o.window(l) > 0;
  if (!windows && !sparse.on()) {
    // every layer reads every earlier token: chunk t > 0 starts at b_t = first + (t - 1) C (first:
    // the first chunk's size); the gradient pages before chunk t < T - 1 and its own rows exist
    const i128 first = N - i128(T - 1) * C, before = i128(T - 1) * first + i128(C) * (T - 1) * (T - 2) / 2;
    const i128 last_begin = T > 1 ? N - C : 0, own = T > 1 ? N - C : 0;
    for (int64_t l = 0; l < L; ++l) {
      kv_in += reads(l) * before * kv_row;
      grads_out += before * grad_row;
      grads_in += (before - last_begin + own) * grad_row;
    }
  } else {
    OOMB_CHECK(T <= kMostSteps / std::max<int64_t>(L, 1), "--seq-len {} in chunks of {}: {} chunks of {} layers are "
               "more than the 2^26 the K/V pages' traffic of sliding windows or sparse attention is counted over",
               N, C, T, L);
    auto begin_of = [&](int64_t t) { return std::max<int64_t>(0, N - (T - t) * C); };
    // rows of the pages [from, pages(b)) before token b
    auto rows_from = [&](int64_t from, int64_t b) { return std::max<int64_t>(0, b - from * P); };
    // rows one prefix read of layer l before token b streams in; chooses: sparse attention chooses
    // among the pages (a bound: every tile a run of its own, every choice different full pages)
    auto read_rows = [&](int64_t l, int64_t b, int64_t n, bool& chooses) {
      const int64_t first = o.first_page(l, b), dense = rows_from(first, b);
      chooses = false;
      if (!sparse.on() || b == 0) return dense;
      const int64_t np = o.kv.pages_for(b), rest0 = std::max(first, std::min(sparse.sinks, np));
      if (np - rest0 <= sparse.pages) return dense;  // every tile takes every candidate: one run
      chooses = true;
      const int64_t tiles = (n + sparse.tile - 1) / sparse.tile;
      return tiles * std::min(dense, (rest0 - first + sparse.pages * sparse.sets(o.kv.kv_heads)) * P);
    };
    for (int64_t c = 0; c < T; ++c) {
      const int64_t b = begin_of(c), e = N - (T - 1 - c) * C, n = e - b;
      for (int64_t l = 0; l < L; ++l) {
        bool chooses = false;
        const int64_t rows = read_rows(l, b, n, chooses);
        if (chooses) r.exact = false;
        kv_in += reads(l) * i128(rows) * kv_row;
        grads_out += rows * grad_row;
        if (c + 1 == T) continue;  // no later chunk left gradients
        // pages a later chunk read: from the next chunk's first page on (first_page grows with b);
        // where sparse chooses, a run may find the page an earlier run of the chunk created: at
        // most every row read
        const int64_t from = o.first_page(l, begin_of(c + 1));
        grads_in += (chooses ? rows : rows_from(std::max(from, o.first_page(l, b)), b)) * grad_row;
        grads_in += std::max<int64_t>(0, e - std::max(b, from * P)) * grad_row;  // own rows
      }
    }
  }
  const i128 kv_out = i128(L) * N * kv_row, limit = i128(1) << 62;
  OOMB_CHECK(kv_in < limit && grads_in < limit && grads_out < limit && kv_out < limit, "--seq-len {}: the K/V "
             "pages' traffic of a step would be more than 2^62 bytes (the plan's counts would overflow)", N);
  r.bytes = {int64_t(kv_in), int64_t(kv_out), int64_t(grads_in), int64_t(grads_out)};
  return r;
}

}  // namespace oomb
