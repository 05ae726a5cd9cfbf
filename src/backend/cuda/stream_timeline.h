// OOMB_CUDA_TIMELINE=1: when the compute stream and the two copy streams were busy in a real run,
// and how much of the copies ran hidden behind compute (backend/stream_times.h). An op's start is a
// timing event recorded just before its first submission (a kernel's launch, a library's call, a
// copy: about_to_submit, called from each), its end one recorded after its last (launched), so an
// op's piece runs from when its stream reached its first work to when it finished its last (host
// work between the two, such as a first call's cuDNN plan or a new GEMM shape's heuristics, counts
// as busy: mostly the first step's); an op that submits nothing adds no piece. Copies and sets
// outside the ops get a pair of their own on their stream. Each piece is placed by its end's time
// from the window's start and measured by its own two events (exact to the events' ~0.5 us however
// long the run). Once 65,536 events are out and none is free, the completed ones are read back and
// reused; the host waits for the rest only in take(), which the trainer calls once a step (after
// the step's update was issued), and which closes the window where the legacy stream reaches it (so
// work not timed, such as NCCL's on the backend's streams, counts as idle). The whole run's figures
// go to stderr when the backend ends.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "backend/stream_times.h"

namespace oomb::cuda {

class StreamTimeline;
extern thread_local StreamTimeline* t_open_timeline;  // the timeline whose op is open on this thread

class StreamTimeline {
 public:
  static constexpr int kStreams = 3;  // compute, copies in, copies out
  StreamTimeline(cudaStream_t compute, cudaStream_t copy_in, cudaStream_t copy_out);
  ~StreamTimeline();
  StreamTimeline(const StreamTimeline&) = delete;
  StreamTimeline& operator=(const StreamTimeline&) = delete;

  void open(cudaStream_t s);    // an op (or a copy) on s begins: its start at its first submission
  void submit(cudaStream_t s);  // work is about to be submitted on s
  void end(cudaStream_t s);     // work submitted on s so far: a piece ends here (the op may go on)
  void close() noexcept;        // the op is over (work submitted since its last end: a piece to here)
  // The figures since the last take (or the start), waiting for the work they cover; a new window
  // starts here.
  StreamTimes take();
  void print() noexcept;  // the run's figures (every window, taken or not), to stderr
  static void poll_after_for_test(size_t events);  // read events back whenever this many are out
  static void rebase_after_for_test(double seconds);  // move the window's base on this often

 private:
  struct Mark {
    cudaEvent_t start, end;  // a piece of work on one stream
  };
  int index(cudaStream_t s) const { return s == streams_[1] ? 1 : s == streams_[2] ? 2 : 0; }
  cudaEvent_t event();
  void read(bool wait);  // the marks complete so far (wait: all of them) into the window's pieces
  void restart();        // a new window: no pieces, from base_ (recorded)

  cudaStream_t streams_[kStreams];
  std::vector<cudaEvent_t> free_;     // events to record again
  size_t made_ = 0;                   // events made
  std::deque<Mark> marks_[kStreams];  // each stream's, recorded, not yet read (in its order)
  bool wanted_[kStreams] = {};        // an open op's start is to be recorded at its next submission
  cudaEvent_t started_[kStreams] = {};  // an open op's start, recorded, its piece not ended
  // the window: pieces so far, the last end, its base event and the base's time in it
  std::vector<Busy> busy_[kStreams];
  double span_ = 0, base_at_ = 0;
  cudaEvent_t base_ = nullptr;
  StreamTimes total_;  // the windows taken
};

// Called just before work is submitted on s: an open op's start is recorded now.
inline void about_to_submit(cudaStream_t s) {
  if (t_open_timeline) t_open_timeline->submit(s);
}

}  // namespace oomb::cuda
