// Page-sparse attention (--sparse-pages K): each tile of a chunk's queries (--sparse-tile rows)
// reads its own chunk densely and, of the earlier pages, only the first --sink-pages S pages and
// the K pages scoring highest against the tile's queries. The score of page p for a tile is the
// sum over its queries and heads of q . mean key of p (--sparse-score mean) or of Quest's upper
// bound sum_d max(q_d min_d, q_d max_d) (quest) (kv/page_meta), per kv head group (each group
// chooses its own pages; the default) or summed over every head into one choice shared by all
// (--sparse-shared, OOMB's way). Scores and top-K run in the backend (Backend::page_topk); only
// the K indices per tile and group come to the host. Ties go to the lower page index, so the
// choice is deterministic; where K covers every earlier page the run reads every page, exactly dense.
//
// The forward sweep chooses and records; the backward sweep's recompute and backward recall the
// record, so the gradient is the exact gradient of the sparse forward. Consecutive tiles that
// chose the same pages form one run, read by one attention call.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "kv/page_meta.h"
#include "kv/paged_kv.h"

namespace oomb {

struct SparseOptions {
  int64_t pages = 0;    // K, earlier pages chosen per tile (0: dense attention)
  int64_t tile = 128;   // query rows per choice
  int64_t sinks = 1;    // the first pages, always read
  bool shared = false;  // one choice for every head (else one per kv head group)
  PageScore score = PageScore::Mean;
  bool on() const { return pages > 0; }
  int64_t sets(int64_t kv_heads) const { return shared ? 1 : kv_heads; }  // choices per tile
  int64_t most_pages(int64_t kv_heads) const { return sinks + pages * sets(kv_heads); }  // one run's union
};

// The flags checked against the run's shape; errors name the flag. pages_given: --sparse-pages
// as given (-1: not given).
SparseOptions sparse_options(int64_t pages_given, int64_t tile, int64_t sinks, bool shared, const std::string& score,
                             int64_t chunk, int64_t kv_heads);

// Query rows [q0, q1) of a chunk and the earlier pages they read, ascending, each with the kv head
// groups that read it (KVBlock::heads).
struct SparseRun {
  int64_t q0 = 0, q1 = 0;
  std::span<const int64_t> pages;
  std::span<const uint64_t> heads;
};

class SparseSelector {
 public:
  SparseSelector(const SparseOptions& o, const KVShape& kv, Backend& be);
  const SparseOptions& options() const { return o_; }

  // A sequence of N tokens in chunks of C (aligned to its end, as model/chunk_inputs cuts them).
  // record: keep every choice for recall (training).
  void begin_sequence(int64_t N, int64_t C, bool record);
  // Chooses for layer l's chunk starting at token `begin`, from the queries q (T, H, D) f32 after
  // RoPE against the metadata of the earlier pages (PageMeta::meta: (pages, G, D) means or
  // (pages, 2, G, D) min/max, as options().score), candidates [first, pages).
  std::span<const SparseRun> choose(int64_t l, int64_t begin, const Tensor& q, const Tensor& meta, int64_t first);
  // The recorded choice of layer l's chunk starting at `begin` (T tokens).
  std::span<const SparseRun> recall(int64_t l, int64_t begin, int64_t T);
  // Tests: the pages tile i of layer l's chunk at `begin` chose for kv head group s (s = 0 when shared).
  std::vector<int64_t> recorded(int64_t l, int64_t begin, int64_t tile, int64_t s) const;

  // Bytes for a sequence of N tokens in chunks of C: in the backend's memory (the scores and the
  // top-K indices) and in host memory (the indices' host copy on a device, one layer's choice, the
  // record when training).
  struct Bytes {
    int64_t backend = 0, host = 0;
  };
  static Bytes plan(const SparseOptions& o, const KVShape& kv, int64_t N, int64_t C, bool record, Tier backend_tier);

 private:
  int64_t stride() const { return 1 + o_.sinks + o_.pages; }  // count, then pages
  int32_t* slots(int64_t l, int64_t begin, int64_t T);      // the record's (or the scratch's) slots
  std::span<const SparseRun> runs(const int32_t* slot, int64_t T);
  static int64_t record_slots(const SparseOptions& o, const KVShape& kv, int64_t N, int64_t C);

  SparseOptions o_;
  KVShape kv_;
  Backend& be_;
  int64_t N_ = 0, C_ = 0, pages_ = 0;
  bool record_ = false;
  Buffer scores_, chosen_, chosen_host_, record_buf_, scratch_;
  std::vector<int64_t> chunk_begin_, chunk_slot_;  // per chunk: first token, first slot
  // the runs handed out (reused: steady-state steps do not allocate)
  std::vector<SparseRun> runs_;
  std::vector<int64_t> run_pages_;
  std::vector<uint64_t> run_heads_;
  std::vector<std::pair<size_t, size_t>> at_;  // per run: its first page in run_pages_, its count
};

}  // namespace oomb
