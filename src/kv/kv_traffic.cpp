#include "kv/kv_traffic.h"

#include <algorithm>

namespace oomb {

KVTrafficPlan plan_kv_traffic(const KVCacheOptions& o, const SparseOptions& sparse, int64_t N, int64_t C,
                              bool layer_order) {
  KVTrafficPlan r;
  if (!o.offload || N <= 0) return r;
  const int64_t L = o.kv.layers, P = o.kv.page_size, T = (N + C - 1) / C;
  const int64_t kv_row = 2 * int64_t(o.kv.row_bytes()), grad_row = 2 * int64_t(o.grad.row_bytes());  // K and V
  const bool reads_last = layer_order || sparse.on();
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
  KVTraffic& t = r.bytes;
  t.kv_out = L * N * kv_row;
  for (int64_t c = 0; c < T; ++c) {
    const int64_t b = begin_of(c), e = N - (T - 1 - c) * C, n = e - b;
    for (int64_t l = 0; l < L; ++l) {
      bool chooses = false;
      const int64_t rows = read_rows(l, b, n, chooses), reads = (l + 1 < L || reads_last ? 1 : 0) + 2;
      if (chooses) r.exact = false;
      t.kv_in += reads * rows * kv_row;
      t.grads_out += rows * grad_row;
      if (c + 1 == T) continue;  // no later chunk left gradients
      // pages a later chunk read: from the next chunk's first page on (first_page grows with b);
      // where sparse chooses, a run may find the page an earlier run of the chunk created: at most
      // every row read
      const int64_t from = o.first_page(l, begin_of(c + 1));
      t.grads_in += (chooses ? rows : rows_from(std::max(from, o.first_page(l, b)), b)) * grad_row;
      t.grads_in += std::max<int64_t>(0, e - std::max(b, from * P)) * grad_row;  // own rows
    }
  }
  return r;
}

}  // namespace oomb
