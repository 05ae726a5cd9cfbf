// The inputs of one chunk in the backend's memory: token ids, next-token targets, RoPE positions
// and (with --doc-mask) document ids. The host computes and validates them (every id inside the
// vocabulary, so no kernel needs to check and no device value is read back), then uploads them
// asynchronously from pinned, double-buffered staging.
#pragma once
#include <functional>
#include <memory>

#include "backend/backend.h"
#include "kv/paged_docs.h"

namespace oomb {

// Supplies tokens [t0, t0 + n) of the current sequence: input ids and next-token targets (< 0: ignored).
// Without side effects: the model reads any span of [0, N), as often as it needs (the backward's
// recompute, the layer order's sweeps, Model::rope_length's look at the documents).
using ChunkReader = std::function<void(int64_t t0, int64_t n, int32_t* ids, int32_t* targets)>;

// Chunk t of T covers [begin, end); chunks are aligned to the end of the sequence, so the last one
// is full and the first may be short.
struct ChunkSpan {
  int64_t begin, end;
  int64_t size() const { return end - begin; }
};
ChunkSpan chunk_span(int64_t N, int64_t C, int64_t t);
int64_t chunk_count(int64_t N, int64_t C);

class ChunkInputs {
 public:
  // doc_sep: the token ending each document (--doc-mask), or -1.
  ChunkInputs(int64_t chunk, int32_t doc_sep, int64_t vocab, Backend& be);
  ~ChunkInputs();
  // Bytes (tag data) in the backend's memory, and in host memory for the staging.
  static size_t device_bytes(int64_t chunk, bool docs);
  static size_t staging_bytes(int64_t chunk, bool docs, Tier backend_tier);

  void begin_sequence();  // document derivation starts afresh
  // Reads chunk c, sets positions (and documents: derived in the forward sweep, first_pass, and
  // stored in `docs`; read back from them in the backward sweep) and uploads. Returns the targets
  // counted.
  int64_t load(const ChunkReader& read, ChunkSpan c, bool first_pass, PagedDocs& docs);

  // Views of the loaded chunk's n tokens in the backend's memory.
  Tensor ids(int64_t n) const { return ids_.rows(0, n); }
  Tensor targets(int64_t n) const { return targets_.rows(0, n); }
  Tensor pos(int64_t n) const { return pos_.rows(0, n); }
  const int32_t* doc() const { return doc_.empty() ? nullptr : doc_.as<int32_t>(); }
  // The loaded chunk's ids in host memory (valid until the load after next).
  const int32_t* host_ids() const { return host_ids_; }

 private:
  struct Stage;
  int64_t C_;
  int32_t sep_;
  int64_t vocab_;
  Backend& be_;
  Arena dev_;  // ids, targets, positions, documents (tag data)
  Tensor ids_, targets_, pos_, doc_;
  std::unique_ptr<Stage> stage_;
  const int32_t* host_ids_ = nullptr;
  int32_t last_id_ = -1, last_doc_ = 0;  // the forward sweep's previous token and its document
};

}  // namespace oomb
