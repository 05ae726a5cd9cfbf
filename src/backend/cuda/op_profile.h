// OOMB_CUDA_PROFILE=1: where a run's GPU time goes, op by op. The compute stream is synchronised
// after every op (so nothing overlaps: a profile, not a timing of the real run), and each op is
// charged the time from its launch call's return to the stream's completion (GPU) and the host
// time since the previous op completed (the model's own work and the launch). Matmuls and
// attention also count their FLOPs (attention as backend/attention_flops.h: what the call may see,
// not what its kernels recompute), so each row has its rate. The table goes to stderr when the
// backend ends, the largest GPU share first, with the GPU time and rate of attention, of the
// matmuls and of everything else; OOMB_CUDA_PROFILE=PATH.json also writes the rows there as JSON
// (under mpirun, rank r > 0 to PATH.rank<r>.json).
// Copies on the copy stream are not seen (they overlap the compute stream's ops in a real run).
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <map>
#include <string>

namespace oomb::cuda {

class OpProfile {
 public:
  explicit OpProfile(std::string json_path = "") : json_path_(std::move(json_path)) {}
  // flops: the op's arithmetic, 0 where it is not counted
  void mark(const char* op, cudaStream_t s, double flops = 0);
  void print() const;

 private:
  struct Row {
    int64_t calls = 0;
    double gpu_s = 0, host_s = 0, flops = 0;
  };
  using Clock = std::chrono::steady_clock;
  std::string json_path_;
  std::map<std::string, Row> rows_;
  Clock::time_point last_ = Clock::now();
};

}  // namespace oomb::cuda
