// Ulysses sequence parallelism's exchange (DeepSpeed Ulysses, arXiv 2309.14509) inside a group of
// P ranks sharing a chunk of T tokens: outside attention rank r holds tokens [r T/P, (r+1) T/P)
// with every head; attention takes all T tokens with heads [r h/P, (r+1) h/P). One all-to-all
// switches between the two. Tensors live in the backend's memory; MPI reads host memory, so a
// device backend's tensors pass through host staging (tag workspace); a group on device memory
// (NCCL) takes them from a device staging buffer, packed there by strided copies.
//
// Head chunks (--sp-head-chunks K, Untied Ulysses / UPipe, arXiv 2602.21196): attention takes the
// rank's heads in K groups, one exchange per group: group j of rank r is heads
// [r h/P + j h/(P K), r h/P + (j + 1) h/(P K)), so the attention side and the staging hold h/(P K)
// heads at once.
#pragma once
#include "backend/backend.h"
#include "core/memory.h"
#include "dist/comm.h"

namespace oomb {

class SeqParallel {
 public:
  // Staging for token-side tensors of up to max_elems f32 elements, exchanged in `groups` head
  // groups (one group's elements: max_elems / groups).
  SeqParallel(Comm& comm, Backend& be, int64_t max_elems, int64_t groups = 1);
  // Host bytes (tag workspace) of the staging: one head group's buffer on a host backend; on a
  // device that and a whole token-side tensor's (its host copy); none where the ranks' group reads
  // device memory. Device bytes: there, one head group's buffer.
  static int64_t host_bytes(int64_t max_elems, int64_t P, Tier backend_tier, bool device_comm = false,
                            int64_t groups = 1);
  static int64_t device_bytes(int64_t max_elems, int64_t P, bool device_comm, int64_t groups = 1);
  int64_t size() const { return comm_.size(); }
  int64_t rank() const { return comm_.rank(); }
  Comm& comm() { return comm_; }

  // loc: (T/P, h, D) this rank's tokens, every head -> att: (T, h/(P K), D) every token, head group
  // `group` of this rank's heads (K = groups; K = 1: all of them)
  void to_heads(const Tensor& loc, Tensor& att, int64_t group = 0, int64_t groups = 1);
  // att: (T, h/(P K), D) -> loc: (T/P, h, D), only head group `group`'s columns written
  void to_tokens(const Tensor& att, Tensor& loc, int64_t group = 0, int64_t groups = 1);
  // out (n, host) := the sum over the group of each rank's sums (n doubles in the backend's memory);
  // over a group on device memory, summed in the device staging first
  void sum_to_host(const void* sums, double* out, int n);
  // Tests only: to_tokens puts head group j's rows in group K - 1 - j's columns, to show that the
  // tests see a wrong grouping.
  static void group_fault_for_test(bool on);

 private:
  Comm& comm_;
  Backend& be_;
  bool host_;    // the backend's memory is host memory
  bool device_;  // the group reads device memory (NCCL)
  Buffer a_, b_;
};

}  // namespace oomb
