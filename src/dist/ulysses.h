// Ulysses sequence parallelism's exchange (DeepSpeed Ulysses, arXiv 2309.14509) inside a group of
// P ranks sharing a chunk of T tokens: outside attention rank r holds tokens [r T/P, (r+1) T/P)
// with every head; attention takes all T tokens with heads [r h/P, (r+1) h/P). One all-to-all
// switches between the two. Tensors live in the backend's memory; MPI reads host memory, so a
// device backend's tensors pass through host staging (tag workspace); a group on device memory
// (NCCL) takes them from a device staging buffer, packed there by strided copies.
#pragma once
#include "backend/backend.h"
#include "core/memory.h"
#include "dist/comm.h"

namespace oomb {

class SeqParallel {
 public:
  // Staging for tensors of up to max_elems f32 elements.
  SeqParallel(Comm& comm, Backend& be, int64_t max_elems);
  // Host bytes (tag workspace) of the staging: one buffer on a host backend, two on a device, none
  // for a group on device memory; device bytes: that group's one buffer.
  static int64_t host_bytes(int64_t max_elems, int64_t P, Tier backend_tier, bool device_comm = false);
  static int64_t device_bytes(int64_t max_elems, int64_t P, bool device_comm);
  int64_t size() const { return comm_.size(); }
  int64_t rank() const { return comm_.rank(); }
  Comm& comm() { return comm_; }

  // loc: (T/P, h, D) this rank's tokens, every head -> att: (T, h/P, D) every token, this rank's heads
  void to_heads(const Tensor& loc, Tensor& att);
  // att: (T, h/P, D) -> loc: (T/P, h, D)
  void to_tokens(const Tensor& att, Tensor& loc);

 private:
  Comm& comm_;
  Backend& be_;
  bool host_;    // the backend's memory is host memory
  bool device_;  // the group reads device memory (NCCL)
  Buffer a_, b_;
};

}  // namespace oomb
