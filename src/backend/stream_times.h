// How two streams spent a stretch of time (OOMB_CUDA_TIMELINE, backend/cuda/stream_timeline.h): the
// compute stream's work and the copy stream's transfers as busy intervals, and from them what ran
// at once and when neither had work. Backend::take_stream_times hands a backend's figures since its
// last call; --metrics writes them per step ("streams").
#pragma once
#include <cstdint>
#include <vector>

namespace oomb {

struct StreamTimes {
  bool on = false;      // the backend measured (a CUDA backend with OOMB_CUDA_TIMELINE=1)
  double span_s = 0;    // from the window's start to the last work in it
  double compute_s = 0; // the compute stream busy (kernels, its copies and sets)
  double copy_s = 0;    // the copy stream busy (transfers between host and device, and its sets)
  double both_s = 0;    // both busy at once: the copies hidden behind compute
  double idle_s = 0;    // neither busy: span_s - (compute_s + copy_s - both_s)
  int64_t ops = 0, copies = 0;  // the pieces of work timed on each stream
  StreamTimes& operator+=(const StreamTimes& o);
};

// A piece of one stream's work, in seconds from the window's start (t0 <= t1).
struct Busy {
  double t0, t1;
};

// The figures for a window of `span` seconds in which the compute stream ran `compute` and the
// copy stream `copy` (each in any order; pieces of one stream may touch or overlap, and count once).
StreamTimes stream_times(std::vector<Busy> compute, std::vector<Busy> copy, double span);

}  // namespace oomb
