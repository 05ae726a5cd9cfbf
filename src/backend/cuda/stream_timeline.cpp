#include "backend/cuda/stream_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace oomb::cuda {

namespace {

void check(cudaError_t e, const char* what) {
  OOMB_CHECK(e == cudaSuccess, "OOMB_CUDA_TIMELINE: {}: CUDA error: {}", what, cudaGetErrorString(e));
}

}  // namespace

StreamTimeline::StreamTimeline(cudaStream_t compute, cudaStream_t copy) : streams_{compute, copy} {
  check(cudaEventCreate(&base_), "an event");
  start_window();
}

StreamTimeline::~StreamTimeline() {
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  cudaEventDestroy(base_);
}

// on the legacy stream: once every earlier piece of work on either stream is done (at a window's
// start both are idle, so at once)
void StreamTimeline::start_window() { check(cudaEventRecord(base_, nullptr), "the window's start"); }

int32_t StreamTimeline::next_event() {
  if (used_ == kMaxEvents) harvest();
  if (used_ == pool_.size()) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "an event");
    pool_.push_back(e);
  }
  return int32_t(used_++);
}

void StreamTimeline::begin(cudaStream_t s) {
  int32_t& p = pending_[index(s)];
  if (p < 0) p = next_event();
  check(cudaEventRecord(pool_[size_t(p)], s), "an op's start");
}

void StreamTimeline::end(cudaStream_t s) {
  const int i = index(s);
  const int32_t e = next_event();
  check(cudaEventRecord(pool_[size_t(e)], s), "an op's end");
  marks_.push_back({i, pending_[i], e});
  pending_[i] = -1;
}

void StreamTimeline::harvest() {
  for (int i = 0; i < 2; ++i) check(cudaStreamSynchronize(streams_[i]), "waiting for the window's work");
  auto at = [&](int32_t e) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, base_, pool_[size_t(e)]), "an event's time");
    return double(ms) * 1e-3;
  };
  std::vector<Busy> busy[2];
  double last[2] = {-1, -1}, span = 0;
  for (const Mark& m : marks_) {
    const double t1 = std::max(0.0, at(m.end));
    const double t0 = std::clamp(m.start >= 0 ? at(m.start) : last[m.stream] >= 0 ? last[m.stream] : t1, 0.0, t1);
    busy[m.stream].push_back({t0, t1});
    last[m.stream] = t1;
    span = std::max(span, t1);
  }
  window_ += stream_times(std::move(busy[0]), std::move(busy[1]), span);
  marks_.clear();
  used_ = 0;
  pending_[0] = pending_[1] = -1;  // (a begin whose work was never issued)
  start_window();
}

StreamTimes StreamTimeline::take() {
  harvest();
  const StreamTimes w = window_;
  total_ += w;
  window_ = {};
  return w;
}

void StreamTimeline::print() {
  if (!marks_.empty()) harvest();
  StreamTimes t = total_;
  t += window_;
  if (!t.on) return;
  auto pct = [&](double s) { return t.span_s > 0 ? 100 * s / t.span_s : 0.0; };
  std::fprintf(stderr, "%s\n",
               fmt::format("oomb CUDA timeline (OOMB_CUDA_TIMELINE): {:.3f} s of the streams' time; compute stream "
                           "busy {:.3f} s ({:.1f}%, {} ops), copy stream {:.3f} s ({:.1f}%, {} transfers), both at "
                           "once {:.3f} s, neither {:.3f} s ({:.1f}%)",
                           t.span_s, t.compute_s, pct(t.compute_s), t.ops, t.copy_s, pct(t.copy_s), t.copies,
                           t.both_s, t.idle_s, pct(t.idle_s))
                   .c_str());
}

}  // namespace oomb::cuda
