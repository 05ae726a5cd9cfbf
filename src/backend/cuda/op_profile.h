// OOMB_CUDA_PROFILE=1: where a run's GPU time goes, op by op. The compute stream is synchronised
// after every op (so nothing overlaps: a profile, not a timing of the real run), and each op is
// charged the time from its launch call's return to the stream's completion (GPU) and the host
// time since the previous op completed (the model's own work and the launch). The table goes to
// stderr when the backend ends, the largest GPU share first. Copies on the copy stream are not
// seen (they overlap the compute stream's ops in a real run).
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <map>
#include <string>

namespace oomb::cuda {

class OpProfile {
 public:
  void mark(const char* op, cudaStream_t s);
  void print() const;

 private:
  struct Row {
    int64_t calls = 0;
    double gpu_s = 0, host_s = 0;
  };
  using Clock = std::chrono::steady_clock;
  std::map<std::string, Row> rows_;
  Clock::time_point last_ = Clock::now();
};

}  // namespace oomb::cuda
