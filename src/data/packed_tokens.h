// Training windows from a token store: the stream of its documents (runs of ids each ended by
// EOS) packed back to back. Window w of N tokens covers stream positions [w*N, w*N + N] (N
// inputs and their N next-token targets), wrapping at the end of the stream. By default the
// stream is the store itself (the `--data FILE.bin` contract). With shuffling, every epoch
// (pass over the stream) takes the documents in its own seeded order. With shuffling or
// `separate`, a last document that does not end with EOS gets one, so that documents never run
// into each other, not even where the stream wraps. With a loss mask (data/loss_mask.h), the
// target at t is ignored (-1) where stream token t + 1 is not trained (an added EOS is).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/loss_mask.h"
#include "data/token_source.h"
#include "data/token_store.h"

namespace oomb {

struct PackingOptions {
  int32_t eos = -1;       // document separator; needed for shuffling
  bool shuffle = false;
  uint64_t seed = 0;
  bool separate = false;  // end the last document with EOS too (for --doc-mask)
};

class PackedTokens final : public TokenSource {
 public:
  PackedTokens(std::unique_ptr<TokenStore> store, int64_t vocab, const PackingOptions& o,
               std::unique_ptr<LossMask> mask = nullptr);
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override;
  // Without --doc-mask: N, or the mask's 1 bits (no ids read)
  int64_t targets_in(int64_t w, int64_t N, int32_t sep = -1) override;
  std::string describe() const override;
  int64_t stream_size() const { return length_; }
  int64_t documents() const { return int64_t(doc_start_.size()); }
  const TokenStore& store() const { return *store_; }
  const LossMask* mask() const { return mask_.get(); }
  // Stream positions [p, p + n) of the stream, in the order training sees them (tests).
  void stream(int64_t p, int64_t n, uint32_t* out);
  // Their loss mask's bits (1 without a mask).
  void stream_mask(int64_t p, int64_t n, uint8_t* out);

 private:
  struct Epoch {
    int64_t index = -1;
    std::vector<int32_t> order;  // document k of the epoch
    std::vector<int64_t> end;    // stream offset (within the epoch) where document k ends
  };
  const Epoch& epoch(int64_t e);
  void check(const uint32_t* ids, int64_t n, int64_t store_pos) const;
  int64_t start_of(int64_t w, int64_t N, int64_t t0, int64_t n) const;  // w * N + t0, checked
  // Stream positions [p, p + n) as runs run(store offset, length), offset -1 for an added EOS.
  void walk(int64_t p, int64_t n, const std::function<void(int64_t, int64_t)>& run);

  std::unique_ptr<TokenStore> store_;
  std::unique_ptr<LossMask> mask_;  // null: every token trained
  int64_t vocab_;
  PackingOptions o_;
  int64_t length_ = 0;               // stream tokens per epoch
  std::vector<int64_t> doc_start_;   // store offset of each document (shuffling only)
  bool virtual_eos_ = false;         // the last document gets an EOS the store lacks
  Epoch cache_[2];
  std::vector<uint32_t> buf_;
  std::vector<uint8_t> mask_buf_;
};

}  // namespace oomb
