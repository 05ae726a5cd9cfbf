#include "backend/cuda/stream_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace oomb::cuda {

thread_local StreamTimeline* t_open_timeline = nullptr;

namespace {

void check(cudaError_t e, const char* what) {
  OOMB_CHECK(e == cudaSuccess, "OOMB_CUDA_TIMELINE: {}: CUDA error: {} (possibly from earlier work; OOMB_CUDA_SYNC=1 "
             "names the op)", what, cudaGetErrorString(e));
}

double seconds(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "an event's time");
  return double(ms) * 1e-3;
}

size_t g_poll_after = size_t(1) << 16;  // events out before the completed ones are read back
double g_rebase_after = 4.0;            // a window's base moves on every ~4 s (float ms keep ~0.5 us)

}  // namespace

void StreamTimeline::poll_after_for_test(size_t events) { g_poll_after = std::max<size_t>(events, 2); }
void StreamTimeline::rebase_after_for_test(double s) { g_rebase_after = s; }

StreamTimeline::StreamTimeline(cudaStream_t compute, cudaStream_t copy_in, cudaStream_t copy_out)
    : streams_{compute, copy_in, copy_out} {
  check(cudaEventCreate(&base_), "an event");
  check(cudaEventRecord(base_, nullptr), "the window's start");
  restart();
}

StreamTimeline::~StreamTimeline() {
  if (t_open_timeline == this) t_open_timeline = nullptr;
  for (const auto& q : marks_)
    for (const Mark& m : q) cudaEventDestroy(m.start), cudaEventDestroy(m.end);
  for (cudaEvent_t e : started_)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  cudaEventDestroy(base_);
}

void StreamTimeline::restart() {
  for (auto& b : busy_) b.clear();
  span_ = base_at_ = 0;
}

cudaEvent_t StreamTimeline::event() {
  if (free_.empty() && made_ >= g_poll_after) read(false);
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "an event");
  ++made_;
  return e;
}

void StreamTimeline::open(cudaStream_t s) {
  wanted_[index(s)] = true;
  t_open_timeline = this;
}

void StreamTimeline::submit(cudaStream_t s) {
  const int i = index(s);
  if (!wanted_[i] || s != streams_[i]) return;
  wanted_[i] = false;
  if (!started_[i]) started_[i] = event();
  check(cudaEventRecord(started_[i], s), "an op's start");
}

void StreamTimeline::end(cudaStream_t s) {
  const int i = index(s);
  if (!started_[i]) return;  // nothing submitted since the last end: no piece
  cudaEvent_t e = event();
  const cudaError_t r = cudaEventRecord(e, s);
  if (r != cudaSuccess) free_.push_back(e);
  check(r, "an op's end");
  marks_[i].push_back({started_[i], e});
  started_[i] = nullptr;
  wanted_[i] = t_open_timeline == this;  // the op goes on: its next piece starts at its next submission
}

void StreamTimeline::close() noexcept {
  if (t_open_timeline == this) t_open_timeline = nullptr;
  for (int i = 0; i < kStreams; ++i) {
    wanted_[i] = false;
    if (!started_[i]) continue;
    try {  // work submitted since the last end: its piece ends with the op
      end(streams_[i]);
    } catch (const std::exception&) {  // (the op's own error, or the next CUDA call's, reports it)
      free_.push_back(started_[i]), started_[i] = nullptr;
    }
    wanted_[i] = false;
  }
}

void StreamTimeline::read(bool wait) {
  for (int i = 0; i < kStreams; ++i) {
    std::deque<Mark>& q = marks_[i];
    while (!q.empty()) {
      const Mark m = q.front();
      if (wait) {
        check(cudaEventSynchronize(m.end), "waiting for the window's work");
      } else {
        const cudaError_t r = cudaEventQuery(m.end);
        if (r == cudaErrorNotReady) {
          if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();  // (not an error: not kept)
          break;
        }
        check(r, "an event");
      }
      const double from_base = seconds(base_, m.end), t1 = std::max(0.0, base_at_ + from_base);
      const double t0 = std::clamp(t1 - seconds(m.start, m.end), 0.0, t1);
      q.pop_front();
      busy_[i].push_back({t0, t1});
      span_ = std::max(span_, t1);
      free_.push_back(m.start);
      if (from_base > g_rebase_after) {  // this end, complete, becomes the base: later times stay small
        free_.push_back(base_);
        base_ = m.end, base_at_ = t1;
      } else {
        free_.push_back(m.end);
      }
    }
  }
}

// The window closes where the legacy stream reaches its end event: after all work issued before,
// timed or not; the event is the next window's base.
StreamTimes StreamTimeline::take() {
  cudaEvent_t next = event();
  const cudaError_t r = cudaEventRecord(next, nullptr);
  if (r != cudaSuccess) free_.push_back(next);
  check(r, "the window's end");
  read(true);
  check(cudaEventSynchronize(next), "waiting for the window's end");
  span_ = std::max(span_, base_at_ + seconds(base_, next));
  const StreamTimes w = stream_times(busy_[0], busy_[1], busy_[2], span_);
  total_ += w;
  free_.push_back(base_);
  base_ = next;
  restart();
  return w;
}

void StreamTimeline::print() noexcept {
  try {
    StreamTimes t = total_;
    t += take();
    if (!t.on) return;
    auto pct = [&](double s) { return t.span_s > 0 ? 100 * s / t.span_s : 0.0; };
    std::fprintf(stderr, "%s\n",
                 fmt::format("oomb CUDA timeline (OOMB_CUDA_TIMELINE): {:.3f} s of the streams' time; compute stream "
                             "busy {:.3f} s ({:.1f}%, {} pieces), copy streams {:.3f} s ({:.1f}%, {} copies and "
                             "sets; in {:.3f} s, out {:.3f} s, both ways at once {:.3f} s), compute and a copy at "
                             "once {:.3f} s, none {:.3f} s ({:.1f}%)",
                             t.span_s, t.compute_s, pct(t.compute_s), t.ops, t.copy_s, pct(t.copy_s), t.copies,
                             t.copy_in_s, t.copy_out_s, t.duplex_s, t.both_s, t.idle_s, pct(t.idle_s))
                     .c_str());
  } catch (const std::exception& e) {  // (a fault the run already reported: the figures are lost with it)
    std::fprintf(stderr, "oomb CUDA timeline (OOMB_CUDA_TIMELINE): no figures: %s\n", e.what());
  }
}

}  // namespace oomb::cuda
