// The collectives of an optimizer step over every rank, on the flat parameter and gradient
// buffers in a backend's memory (host memory directly; a device's through host staging, tag
// workspace, or directly and on device staging when the group reads device memory, NCCL):
//   --zero 0  gradients summed over every rank (the sp ranks' partial sums, the dp ranks' sequences);
//   --zero 1  the same, then each rank updates its shard and the shards are gathered;
//   --zero 2  gradients reduce-scattered: each rank receives only its shard's sum;
//   --zero 3  nothing here: the parameter store reduces and gathers per layer (model/param_store.h).
#pragma once
#include "backend/backend.h"
#include "core/memory.h"
#include "dist/comm.h"

namespace oomb {

// Rank r's range [lo, hi) of n elements split over P ranks: blocks of ceil(n / P) rounded up to 16.
struct Shard {
  int64_t lo = 0, hi = 0, block = 0;
  static Shard of(int64_t n, int rank, int ranks);
  int64_t size() const { return hi - lo; }
  int64_t held() const { return size() > 0 ? size() : 1; }  // what a shard's buffers hold (at least 1)
};

int64_t grad_sync_piece();  // floats per staged collective call

class GradSync {
 public:
  // home: the tier of the gradients it is given (the backend's, or pinned with --offload params)
  GradSync(Comm& world, Backend& be, int64_t n, int zero, Tier home);
  // Host and device bytes (tag workspace) of the staging for n elements over P ranks; device_comm:
  // the group reads device memory (NCCL).
  static int64_t host_bytes(int64_t n, int ranks, int zero, Tier home, bool device_comm = false);
  static int64_t device_bytes(int64_t n, int ranks, int zero, bool device_comm);
  const Shard& shard() const { return shard_; }
  // grads (n): the sum over ranks (zero 0, 1), or at [lo, hi) this rank's shard of it (zero 2).
  void reduce(const Tensor& grads);
  // params (n): every rank's shard gathered (zero 1, 2: after each rank updated its own).
  void gather(const Tensor& params);

 private:
  Comm& comm_;
  Backend& be_;
  int64_t n_;
  int zero_;
  Shard shard_;
  Tier st_;       // the staging's memory: the host's, or the device's for a group on device memory
  Buffer stage_;  // (P * block) floats: a device's or a padded copy
};

}  // namespace oomb
