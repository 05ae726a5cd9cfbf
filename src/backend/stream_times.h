// How the streams spent a stretch of time (OOMB_CUDA_TIMELINE, backend/cuda/stream_timeline.h): the
// compute stream's work and the two copy streams' transfers (in: Stream::Copy, out: Stream::CopyOut)
// as busy intervals, and from them what ran at once and when none had work. Backend::take_stream_times hands a backend's figures since its
// last call; --metrics writes them per step ("streams").
#pragma once
#include <cstdint>
#include <vector>

namespace oomb {

struct StreamTimes {
  bool on = false;      // the backend measured (a CUDA backend with OOMB_CUDA_TIMELINE=1)
  double span_s = 0;    // from the window's start to the last work in it
  double compute_s = 0; // the compute stream busy (kernels, its copies and sets)
  double copy_s = 0;    // a copy stream busy (transfers between host and device, and their sets)
  double copy_in_s = 0, copy_out_s = 0;  // each copy stream busy (Stream::Copy, Stream::CopyOut)
  double duplex_s = 0;  // both copy streams busy at once (transfers both ways)
  double both_s = 0;    // compute and a copy at once: the copies hidden behind compute
  double idle_s = 0;    // none busy: span_s - (compute_s + copy_s - both_s)
  int64_t ops = 0, copies = 0;  // the pieces of work timed on each stream
  StreamTimes& operator+=(const StreamTimes& o);
};

// A piece of one stream's work, in seconds from the window's start (t0 <= t1).
struct Busy {
  double t0, t1;
};

// The figures for a window of `span` seconds in which the compute stream ran `compute` and the
// copy streams `copy_in` and `copy_out` (each in any order; pieces of one stream may touch or
// overlap, and count once).
StreamTimes stream_times(std::vector<Busy> compute, std::vector<Busy> copy_in, std::vector<Busy> copy_out,
                         double span);

}  // namespace oomb
