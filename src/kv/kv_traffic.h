// Bytes an offloaded KV cache (--offload kv) copies between pinned host memory and the device for
// one training sequence of N tokens in chunks of C (aligned to its end), counted from the same
// rules KVCache's streams follow (KVCache::traffic measures them; test_sweep).
//
// Per layer l and chunk t starting at token b: a prefix read streams in the K/V rows of pages
// [first_page(l, b), pages(b)), b - first_page * P rows (the last page may be partial).
//   forward sweep:  each attending layer reads its prefix; every layer writes the chunk's K/V out
//                   (L x N rows in all). The chunk order's forward skips the last layer's attention
//                   (dense); the layer order's attends every layer (its pass is the layer's whole
//                   forward); sparse attention attends every layer in both.
//   backward:       every layer reads its prefix again twice (the recompute, the backward); the
//                   backward's read takes the pages' gradients too: in where a later chunk left
//                   something (pages from first_page(l, b_{t+1}) on), zero-filled otherwise (no
//                   copy), and all out. The chunk's own dK/dV start from the rows of its tokens
//                   that a later chunk read (own_grads).
// The two orders read the same pages of the same layers in the backward, so they differ only by
// the last layer's forward reads (dense). keep (--keep-attention): every layer attends in the
// forward sweep, and the recompute reads nothing (its attention outputs are kept): two prefix reads
// per layer and chunk in either order.
//
// Sparse attention (--sparse-pages) reads per run of tiles the pages its tiles chose, which the
// plan cannot know: where a chunk's candidates outnumber K the count is an upper bound (every
// tile its own run, each kv head group choosing different full pages, every gradient page the
// dense backward would find), and `exact` is false. Both orders read the same runs, so the bound
// does not change --sweep auto's choice.
//
// Full attention is summed in closed form; sliding windows and sparse attention chunk by chunk (at
// most 2^26 chunks x layers). A step beyond 2^62 bytes is refused, naming --seq-len.
#pragma once
#include <cstdint>

#include "kv/kv_cache.h"
#include "kv/sparse_select.h"

namespace oomb {

struct KVTrafficPlan {
  KVTraffic bytes;
  bool exact = true;  // false: sparse attention's upper bound
};

// layer_order: --sweep layer (else the chunk order); keep: --keep-attention. Zero when the cache is
// resident.
KVTrafficPlan plan_kv_traffic(const KVCacheOptions& o, const SparseOptions& sparse, int64_t N, int64_t C,
                              bool layer_order, bool keep = false);

}  // namespace oomb
