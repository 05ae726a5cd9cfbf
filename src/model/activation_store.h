// The layer-major sweep's activations in host memory (--sweep layer; issue 18, as ALST offloads
// its checkpoints): per chunk of a sequence, what one layer hands the next across the whole
// sequence. Array a (a = 0..L-1) holds layer a's output h_{a+1} for every token (N x d, fp32); the
// gradient flowing down (dh) takes the top array's place once the loss has read it, or an array of
// its own when the embedding is tied (the lm_head's gradient is then computed again beside the
// embedding's, from the top array; train/layer_sweep.cpp). The embedding's output h_0 is never
// kept: its lookup is recomputed. Arrays live in pinned host memory on a device, in host memory on
// the CPU (tag activations); chunks pass through device slots.
//
// A pass visits chunks in a given order, reading up to two arrays into the device and writing at
// most one back. Two sets of slots, double-buffered: chunk i+1's reads arrive on the copy stream
// while chunk i computes; next() sends chunk i's output out (on the copy-out stream, beside the
// reads) once the compute stream is done with it, and starts chunk i+2's reads into the freed slots
// once it has landed. Events order the streams; the host never waits. Bytes moved are counted (traffic), as model/sweep_plan counts them.
#pragma once
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "hf/config.h"

namespace oomb {

class ActivationStore {
 public:
  static constexpr int kMaxReads = 2;
  // arrays: L, or L + 1 with an array of its own for dh (tied embedding); chunks of up to C tokens.
  ActivationStore(const ModelConfig& c, Backend& be, int64_t C, int64_t arrays);
  ~ActivationStore();
  static int64_t arrays(const ModelConfig& c, bool tied_grads) { return c.layers + (tied_grads ? 1 : 0); }
  // Where the arrays live: pinned host memory beside a device, the CPU's own memory otherwise.
  static Tier home(Tier backend) { return backend == Tier::Host ? Tier::Host : Tier::Pinned; }
  static int64_t host_bytes(const ModelConfig& c, int64_t arrays, int64_t N) { return arrays * N * c.hidden * 4; }
  static int64_t device_bytes(const ModelConfig& c, int64_t C);  // the slots, in the backend's tier

  void begin_sequence(int64_t N);  // the arrays sized for N tokens (allocated once for the largest N)
  // A pass over the sequence's chunks (of C, chunk_span) in `chunks`, reading arrays `reads` and
  // writing array `write` (-1: none) from out(): the write slot, or read `write_from`'s slot (a
  // gradient updated in place).
  void begin_pass(std::span<const int64_t> chunks, std::initializer_list<int64_t> reads, int64_t write,
                  int write_from = -1);
  // The current chunk's rows in the device: read k (waits for its arrival), the output.
  Tensor in(int k);
  Tensor out();
  void next();  // the compute stream is done with the current chunk

  struct Traffic {
    int64_t in = 0, out = 0;  // bytes copied into and out of the device
  };
  const Traffic& traffic() const { return traffic_; }

  // Tests only: skip the wait for a chunk's reads ("in"), or a fetch's for the outputs sent out
  // ("gone"), to show that the tests catch it.
  static void drop_wait_for_test(const char* which);

 private:
  void fetch(size_t pos);
  float* row(int64_t array, int64_t token) const;

  ModelConfig cfg_;
  Backend& be_;
  int64_t C_, arrays_, N_ = 0;
  Buffer host_;
  Arena slots_;
  Tensor rd_[2][kMaxReads], wr_[2];
  std::unique_ptr<Event> arrived_[2], used_[2];
  std::unique_ptr<Event> gone_;  // the last output sent out (Stream::CopyOut)
  Traffic traffic_;
  // the pass
  std::vector<int64_t> chunks_;
  int64_t reads_[kMaxReads] = {}, nreads_ = 0, write_ = -1;
  int write_from_ = -1;
  size_t pos_ = 0;
};

}  // namespace oomb
