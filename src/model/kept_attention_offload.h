// --offload attention (with --keep-attention): the kept attention outputs and LSEs live in pinned
// host memory (the store, every layer's and head group's (N, H, D) output and (N, H) LSE), and each
// chunk's rows pass through one of two sets of device slots, so that the device holds two chunks'
// worth (constant in N) instead of the sequence's (MEMO's swap of what recomputing would make again):
//   a pass takes the sets by its chunks' positions in it, alternating;
//   the forward sweep (chunks in order) writes each chunk's outputs into its set; once the compute
//     stream is done with the chunk they go home on the copy-out stream, and the chunk two places on
//     waits for them to have gone before it writes the set again;
//   the backward sweep (chunks in reverse) reads them: each chunk's come into its set on the copy
//     stream while the one before it in the pass (the next later chunk) computes, once the compute
//     stream is done with the set and everything sent home has landed. Its first two chunks (the
//     sequence's last two) are still in the sets the forward sweep left them in: they come from
//     nowhere, so nothing waits on a way out and back and two chunks' rows fewer cross.
// Events order the streams; the host never waits. The same bits as the store on the device.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/chunk_inputs.h"

namespace oomb {

class KeptAttentionOffload {
 public:
  // o, lse: the store in host memory, an (N, H, D) output and an (N, H) LSE per layer and head group
  // (Model's kept_o_, kept_lse_); C: tokens per chunk. The slots take device_bytes(o, lse, C).
  KeptAttentionOffload(Backend& be, std::span<const Tensor> o, std::span<const Tensor> lse, int64_t C);
  ~KeptAttentionOffload();
  // Both sets of slots: every array's first C rows, twice (as Arena::need rounds each).
  static int64_t device_bytes(std::span<const Tensor> o, std::span<const Tensor> lse, int64_t C);

  // A pass over a sequence of N tokens, its chunks (chunk_span(N, C, ·)) in the order `chunks`:
  // writing (the forward sweep) or reading (the backward sweep).
  void begin_pass(int64_t N, std::span<const int64_t> chunks, bool write);
  // Array a's rows of chunk c, the pass's current chunk, in its device slot (read: they have arrived
  // by the time the compute stream reaches what follows).
  Tensor o(size_t a, ChunkSpan c) const;
  Tensor lse(size_t a, ChunkSpan c) const;
  void next();  // the compute stream is done with the current chunk

  struct Traffic {
    int64_t in = 0, out = 0;  // bytes copied into and out of the device
  };
  const Traffic& traffic() const { return traffic_; }

  // Tests only: skip the compute stream's wait for a chunk's rows to arrive ("in"), for a set's
  // previous rows to have gone home before the forward sweep writes it again ("write"), or a
  // fetch's for every row sent home ("gone"), to show that the tests catch it.
  static void drop_wait_for_test(const char* which);

 private:
  void fetch(size_t pos);
  void copy_rows(int set, ChunkSpan c, bool in);
  void enter(size_t pos);  // the compute stream's wait before it touches the chunk's slots
  int set(size_t pos) const { return int((pos + first_set_) & 1); }
  ChunkSpan span(size_t pos) const;
  void check(ChunkSpan c) const;

  Backend& be_;
  std::vector<Tensor> host_o_, host_lse_;
  int64_t C_;
  Arena slots_;
  std::vector<Tensor> o_[2], lse_[2];
  std::unique_ptr<Event> arrived_[2], used_[2], gone_[2];
  int last_gone_ = -1;  // the set whose rows went home last (the copy-out stream runs in order)
  // the tokens whose rows set s holds, as they are at home (empty: none, or being written)
  ChunkSpan holds_[2] = {};
  Traffic traffic_;
  // the pass
  int64_t N_ = 0;
  std::vector<int64_t> chunks_;
  bool write_ = false;
  size_t pos_ = 0;
  size_t first_set_ = 0;  // the set of the pass's first chunk
};

}  // namespace oomb
