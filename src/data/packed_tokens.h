// Training windows from a token store: the stream of its documents (runs of ids each ended by
// EOS) packed back to back. Window w of N tokens covers stream positions [w*N, w*N + N] (N
// inputs and their N next-token targets), wrapping at the end of the stream. By default the
// stream is the store itself (the `--data FILE.bin` contract). With shuffling, every epoch
// (pass over the stream) takes the documents in its own seeded order. With shuffling or
// `separate`, a last document that does not end with EOS gets one, so that documents never run
// into each other, not even where the stream wraps. With a loss mask (data/loss_mask.h), the
// target at t is ignored (-1) where stream token t + 1 is not trained (an added EOS is).
// With `whole` (--packing whole; packed_whole.cpp), windows hold whole documents instead: each
// epoch's documents, in its order, fill windows of N + 1 tokens one after another while they fit
// (next fit), the rest of a window padding (EOS ids, no targets); a document longer than N + 1
// takes windows of its own, at offsets 0, N, 2N, ... of it, so each of its targets is read once.
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
  bool whole = false;     // windows of whole documents (above)
};

// --packing whole's windows of N tokens for one epoch (the first: without --shuffle, every epoch's)
struct WholePacking {
  int64_t windows = 0;      // per epoch
  int64_t documents = 0;
  int64_t split = 0;        // documents longer than N + 1, over windows of their own
  int64_t padding = 0;      // padding tokens of the windows' N + 1
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
  bool whole() const { return o_.whole; }
  WholePacking whole_packing(int64_t N);  // (whole only)
  // Windows of N an epoch holds without wrapping around (at least 1): whole windows of the stream,
  // or --packing whole's windows
  int64_t windows_per_epoch(int64_t N);
  // Where window w of N starts: its epoch and the stream offset within it (a checkpoint's state).
  std::pair<int64_t, int64_t> position_of(int64_t w, int64_t N);
  // --packing whole's line for the run's banner: windows, documents split, padding.
  std::string whole_summary(int64_t N);
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
  // --packing whole (packed_whole.cpp): epoch e's windows of N, each a stream range of the epoch
  // (start, used tokens) padded to N + 1; window w's epoch and index in it.
  struct Layout {
    int64_t epoch = -1, N = 0;
    std::vector<int64_t> start, used;
  };
  const Layout& layout(int64_t e, int64_t N);
  std::pair<int64_t, int64_t> locate(int64_t w, int64_t N);
  void read_whole(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets);

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
  Layout layouts_[2];
  std::vector<int64_t> first_window_;  // --packing whole: windows before epoch e, for the N below
  int64_t first_window_N_ = 0;
};

}  // namespace oomb
