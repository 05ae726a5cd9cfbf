// The KV cache of one sequence: K/V pages, KV-gradient pages and document pages, where they live
// (residency), and the blocks a layer's attention reads.
//
// Resident (default): every page in the backend's memory; a layer reads all its earlier pages as
// one group of blocks.
// Offloaded (--offload kv): K/V and gradient pages live in pinned host memory; the device holds
// two slots of `group` pages (double-buffered). A layer's earlier pages stream through the slots
// group by group on the copy stream while attention folds the previous group in; in backward each
// group's gradient pages come in (or start at zero), take the group's dK/dV, and go back out on the
// copy-out stream. The chunk's new K/V go out (copy-out stream) through a staging buffer as later
// layers compute; what comes in waits for what went out before it. Events order the three
// streams; the result is bitwise identical to the resident run (attention folds groups exactly).
// A pass announces the order in which layers will read their prefix (begin_pass), so the next
// layer's first group arrives while this layer finishes.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "kv/page_meta.h"
#include "kv/paged_docs.h"
#include "kv/paged_kv.h"

namespace oomb {

struct KVCacheOptions {
  KVShape kv, grad;       // K/V pages and gradient pages (dtype, page size, heads)
  bool docs = false;      // document ids per token (--doc-mask)
  bool offload = false;   // --offload kv
  int64_t group = 0;      // pages per group streamed through the device (offload)
  int64_t chunk = 0;      // C: tokens of the largest chunk written at once
  bool meta = false;      // page metadata for sparse attention (--sparse-pages)
  PageScore score = PageScore::Mean;  // which metadata (--sparse-score)
  int64_t sparse_pages = 0;  // sparse: the most earlier pages one query tile reads (0: dense)
  std::vector<int64_t> windows;  // per layer: a sliding window (0 or absent: full attention)
  // --sweep layer: the backward takes one layer over every chunk at a time, so only one layer's
  // gradient pages exist at once (the chunk order holds every layer's)
  bool layer_major = false;
  // --sp-head-chunks K: the cache's layers come K per model layer (its kv head groups), so
  // kv.layers = K x the model's; `windows` lists each of them
  int64_t head_chunks = 1;
  int64_t window(int64_t layer) const { return size_t(layer) < windows.size() ? windows[size_t(layer)] : 0; }
  // The first page a chunk starting at token `begin` reads in `layer`: pages wholly behind every
  // query's window are neither read nor given gradient pages.
  int64_t first_page(int64_t layer, int64_t begin) const;
};

// Bytes an offloaded cache copied between pinned host memory and the device (zero fills not
// counted): K/V pages in (prefix reads) and out (a chunk's new K/V), gradient pages in (those that
// already hold something, and the chunk's own rows) and out (after a group's backward).
struct KVTraffic {
  int64_t kv_in = 0, kv_out = 0, grads_in = 0, grads_out = 0;
  int64_t kv() const { return kv_in + kv_out; }
  int64_t grads() const { return grads_in + grads_out; }
};

// The earlier tokens' blocks of one layer, visited in groups: acquire(i) makes group i resident
// (waiting for its copies), release(i) hands its slot back (sending its gradient pages out).
class PrefixBlocks {
 public:
  virtual ~PrefixBlocks() = default;
  virtual int64_t groups() const = 0;
  virtual std::span<const KVBlock> acquire(int64_t i) = 0;
  virtual void release(int64_t i) = 0;
};

class KVCache {
 public:
  KVCache(const KVCacheOptions& o, Backend& be);
  ~KVCache();
  const KVCacheOptions& options() const { return o_; }

  // A new sequence of N tokens: every page released; the pools hold what N needs (gradient
  // pages for the N - last-chunk tokens when with_grads), so the step allocates no page.
  void begin_sequence(int64_t N, int64_t last_chunk, bool with_grads);
  void clear();  // every page released (and every copy finished)

  // The order of the coming prefix reads of one pass (layers, each over tokens [0, end)), so the
  // offloaded cache can prefetch across layers. Resident caches ignore it.
  void begin_pass(std::span<const int64_t> layers, int64_t end, bool grads);
  // Layer l's blocks of tokens [0, end) (with their gradient pages when grads), in groups; valid
  // until the next call.
  PrefixBlocks& prefix(int64_t l, int64_t end, bool grads);
  // Layer l's blocks of the listed pages only (ascending, each before token `end`), in groups:
  // sparse attention's chosen pages; only they (and their gradient pages) move. Valid until the
  // next call.
  PrefixBlocks& prefix_pages(int64_t l, int64_t end, bool grads, std::span<const int64_t> pages);

  // Stores the chunk's K (after RoPE) and V, (T, G, D) f32, at tokens [t0, t0 + T) of layer l.
  void write(int64_t l, int64_t t0, const Tensor& k, const Tensor& v);
  // dk, dv (T, G, D) f32 := what later chunks accumulated for tokens [t0, t0 + T) (0 where none).
  void own_grads(int64_t l, int64_t t0, Tensor& dk, Tensor& dv);
  // Layer l's K/V and gradient pages from first_page on: no remaining chunk reads them.
  void release_from(int64_t l, int64_t first_page);

  // Bytes copied so far (offloaded; zero when resident): kv/kv_traffic plans the same counts.
  const KVTraffic& traffic() const;

  PagedDocs& docs() { return docs_; }
  const PageMeta& page_meta() const { return meta_; }  // with options().meta
  const PagedKV& kv() const { return kv_; }
  const PagedKV& kv_grad() const { return grad_; }

  // Gradient pages a sequence of N tokens in chunks of C needs at once (layers together; with
  // layer_major, the layer that needs the most).
  static int64_t grad_pages(const KVCacheOptions& o, int64_t N, int64_t C);
  // Bytes by (tier, tag) the cache holds for a sequence of N tokens whose last chunk has C tokens.
  struct Bytes {
    int64_t device_kv = 0, device_kv_grad = 0, device_data = 0, home_kv = 0, home_kv_grad = 0;
  };
  static Bytes plan(const KVCacheOptions& o, int64_t N, int64_t C, bool with_grads);
  // The group actually used for a sequence of N tokens (the option, at most a layer's pages).
  static int64_t group_for(const KVCacheOptions& o, int64_t N);

  // Tests only: skip one of the offload's waits ("in", "out", "write", "own", "gone": a fetch's
  // for what went home before it), to show that the tests catch it.
  static void drop_wait_for_test(const char* which);

 private:
  class Resident;
  class Streamed;
  Backend& be_;
  KVCacheOptions o_;
  PagedKV kv_, grad_;  // in the backend's memory, or pinned host memory when offloaded
  PagedDocs docs_;     // always in the backend's memory (4 bytes per token)
  PageMeta meta_;      // always in the backend's memory (sparse attention)
  std::unique_ptr<Resident> resident_;
  std::unique_ptr<Streamed> streamed_;
};

}  // namespace oomb
