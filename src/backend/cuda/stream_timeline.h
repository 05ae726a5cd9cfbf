// OOMB_CUDA_TIMELINE=1: when the compute stream and the copy stream were busy in a real run, and
// how much of the copies ran hidden behind compute (backend/stream_times.h). Each op, and each
// copy or set on the copy stream, gets a timing event before its launch and one after: it ran
// from when its stream reached the first (the earlier work done, the launch issued) to when it
// reached the second. Nothing waits for the events until take(), which the trainer calls once a
// step with --metrics (after the step's own readback of the loss), so the run keeps its overlap;
// the events cost two records an op. The whole run's figures go to stderr when the backend ends.
// Work NCCL issues on the backend's streams is not seen.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/stream_times.h"

namespace oomb::cuda {

class StreamTimeline {
 public:
  StreamTimeline(cudaStream_t compute, cudaStream_t copy);
  ~StreamTimeline();
  StreamTimeline(const StreamTimeline&) = delete;
  StreamTimeline& operator=(const StreamTimeline&) = delete;

  // Work is about to be issued on s (a begin with no end since: recorded again, here).
  void begin(cudaStream_t s);
  // Work was issued on s: from the last begin on s (none: from its previous end) to here.
  void end(cudaStream_t s);
  // The figures since the last take (or the start), waiting for the work they cover; a new window
  // starts here.
  StreamTimes take();
  void print();  // the run's figures (every window, taken or not), to stderr

 private:
  struct Mark {
    int stream;           // 0 compute, 1 copy
    int32_t start, end;   // events in pool_ (start -1: none)
  };
  static constexpr size_t kMaxEvents = size_t(1) << 20;  // then folded into the window's figures
  int index(cudaStream_t s) const { return s == streams_[1] ? 1 : 0; }
  int32_t next_event();
  void harvest();       // the marks so far into window_, after waiting for them; a new base
  void start_window();  // base_ recorded (both streams idle: made so, or never used)

  cudaStream_t streams_[2];
  std::vector<cudaEvent_t> pool_;
  size_t used_ = 0;
  int32_t pending_[2] = {-1, -1};
  std::vector<Mark> marks_;
  cudaEvent_t base_ = nullptr;
  StreamTimes window_, total_;
};

}  // namespace oomb::cuda
