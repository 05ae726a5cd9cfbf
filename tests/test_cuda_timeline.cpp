// OOMB_CUDA_TIMELINE (backend/cuda/stream_timeline.h): every op and every copy or set on the copy
// streams counted once, the figures adding up, nothing counted for an op its checks refuse or one
// that submits nothing, the host's pause between two ops counted as idle (with the window's base
// moved on every millisecond too), the same figures with events read back as they complete, the
// same bits with the timeline as without; on a GPU, a copy issued beside a long run of kernels
// counted as hidden behind them, and copies both ways at once counted as such. Skips without a GPU; runs everywhere on simt (whose
// cudaEventQuery runs the stream up to the event: events read early are always complete there).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/memory.h"
#include "test_util.h"
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)
#include "backend/cuda/stream_timeline.h"
#endif

using namespace oomb;
using namespace oomb::testing;

namespace {

std::unique_ptr<Backend> timed_backend(bool on, std::string* why) {
  const ScopedEnv timeline("OOMB_CUDA_TIMELINE", on ? "1" : "0");
  return make_cuda_backend(why);
}

// y (T, n) = x (T, n) . w^T on the device, from seeded values
struct Matmul {
  int64_t T, n;
  Buffer x, w, y;
  Matmul(Backend& be, int64_t T_, int64_t n_)
      : T(T_), n(n_), x(Tier::Device, Tag::Workspace, size_t(T * n) * 4), w(Tier::Device, Tag::Workspace, size_t(n * n) * 4),
        y(Tier::Device, Tag::Workspace, size_t(T * n) * 4) {
    const std::vector<float> hx = randn(size_t(T * n), 1), hw = randn(size_t(n * n), 2, 0.05f);
    be.copy(x.data(), Tier::Device, hx.data(), Tier::Host, hx.size() * 4);
    be.copy(w.data(), Tier::Device, hw.data(), Tier::Host, hw.size() * 4);
  }
  Tensor tx() const { return Tensor(x.data(), DType::F32, {T, n}, Tier::Device); }
  Tensor tw() const { return Tensor(w.data(), DType::F32, {n, n}, Tier::Device); }
  Tensor ty() const { return Tensor(y.data(), DType::F32, {T, n}, Tier::Device); }
  void run(Backend& be) {
    Tensor out = ty();
    be.linear_fwd(tx(), tw(), nullptr, out);
  }
  std::vector<float> result(Backend& be) const {
    std::vector<float> h(size_t(T * n));
    be.copy(h.data(), Tier::Host, y.data(), Tier::Device, h.size() * 4);
    return h;
  }
};

// bytes of pinned memory (set to ones) and as many on the device
struct Transfer {
  size_t bytes;
  Buffer pinned, dev;
  explicit Transfer(size_t n) : bytes(n), pinned(Tier::Pinned, Tag::Workspace, n), dev(Tier::Device, Tag::Workspace, n) {
    std::memset(pinned.data(), 1, n);
  }
  void up(Backend& be) { be.copy_async(dev.data(), Tier::Device, pinned.data(), Tier::Pinned, bytes, Stream::Copy); }
  void down(Backend& be) { be.copy_async(pinned.data(), Tier::Pinned, dev.data(), Tier::Device, bytes, Stream::CopyOut); }
};

// A timed backend whose streams overlap (a GPU's; simt runs one stream's work at a time), or null
// saying why not.
std::unique_ptr<Backend> overlapping_backend(std::string* why) {
#ifdef OOMB_SIMT
  *why = "simt runs one stream's work at a time: nothing overlaps there";
  return nullptr;
#else
  return timed_backend(true, why);
#endif
}

// the figures printed, and consistent: the parts of the span add up to it
void expect_adds_up(const StreamTimes& t) {
  std::cout << "compute " << t.compute_s << " s, copy " << t.copy_s << " s (in " << t.copy_in_s << " s, out "
            << t.copy_out_s << " s, both ways " << t.duplex_s << " s), both " << t.both_s << " s, idle " << t.idle_s
            << " s of " << t.span_s << " s" << std::endl;
  EXPECT_TRUE(t.on);
  EXPECT_GE(t.both_s, 0);
  EXPECT_LE(t.both_s, std::min(t.compute_s, t.copy_s) + 1e-12);
  EXPECT_GE(t.idle_s, 0);
  EXPECT_NEAR(t.compute_s + t.copy_s - t.both_s + t.idle_s, t.span_s, 1e-9 + 1e-6 * t.span_s);
  EXPECT_NEAR(t.copy_in_s + t.copy_out_s - t.duplex_s, t.copy_s, 1e-9 + 1e-6 * t.span_s);
}

}  // namespace

TEST(CudaTimeline, OffUnlessAsked) {
  std::string why;
  auto be = timed_backend(false, &why);
  if (!be) GTEST_SKIP() << why;
  Matmul mm(*be, 64, 128);
  mm.run(*be);
  EXPECT_FALSE(be->take_stream_times().on);
}

// Three matmuls and an add on the compute stream, a copy and a set on the copy stream, and a copy
// back on the copy-out stream.
static StreamTimes four_ops_and_three_copies(Backend& be) {
  Matmul mm(be, 256, 512);
  Transfer tr(size_t(4) << 20);
  be.take_stream_times();  // (the copies of the matrices above: on the compute stream)
  for (int i = 0; i < 3; ++i) mm.run(be);
  tr.up(be);
  be.fill_zero_async(tr.dev.data(), tr.bytes / 2, Stream::Copy);
  tr.down(be);
  Tensor y = mm.ty();
  be.add(y, mm.ty());
  // refused by its checks (w's shape): nothing issued, nothing counted
  Tensor bad(mm.w.data(), DType::F32, {7, 512}, Tier::Device);
  EXPECT_THAT(error_of([&] { be.linear_fwd(mm.tx(), bad, nullptr, y); }), ::testing::HasSubstr("linear_fwd"));
  be.synchronize();
  return be.take_stream_times();
}

TEST(CudaTimeline, CountsEachOpAndCopyOnceAndAddsUp) {
  std::string why;
  auto be = timed_backend(true, &why);
  if (!be) GTEST_SKIP() << why;
  const StreamTimes t = four_ops_and_three_copies(*be);
  EXPECT_EQ(t.ops, 4);
  EXPECT_EQ(t.copies, 3);
  EXPECT_GT(t.compute_s, 0);
  EXPECT_GT(t.copy_s, 0);
  EXPECT_GT(t.copy_in_s, 0);
  EXPECT_GT(t.copy_out_s, 0);
  expect_adds_up(t);
  const StreamTimes none = be->take_stream_times();  // a new window, with nothing in it
  EXPECT_TRUE(none.on);
  EXPECT_EQ(none.ops + none.copies, 0);
  EXPECT_EQ(none.compute_s + none.copy_s, 0);
}

// Events read back (and reused) whenever four are out, not only at take(): the same counts.
TEST(CudaTimeline, EventsReadBackAsTheyCompleteGiveTheSameCounts) {
  std::string why;
  auto be = timed_backend(true, &why);
  if (!be) GTEST_SKIP() << why;
  cuda::StreamTimeline::poll_after_for_test(4);
  const StreamTimes t = four_ops_and_three_copies(*be);
  cuda::StreamTimeline::poll_after_for_test(size_t(1) << 16);
  EXPECT_EQ(t.ops, 4);
  EXPECT_EQ(t.copies, 3);
  EXPECT_GT(t.compute_s, 0);
  expect_adds_up(t);
}

// A matmul, the host's 60 ms pause (the device waiting for it), then `second`: the pause idle, not
// busy, and the window no longer than the wall clock says.
static StreamTimes matmul_pause_then(Backend& be, const std::function<void(Matmul&)>& second) {
  Matmul mm(be, 64, 128);
  be.synchronize();
  const auto w0 = std::chrono::steady_clock::now();
  be.take_stream_times();
  mm.run(be);
  be.synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  second(mm);
  const StreamTimes t = be.take_stream_times();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  expect_adds_up(t);
  EXPECT_GE(t.idle_s, 0.055);
  EXPECT_LE(t.compute_s, t.span_s - 0.055);
  EXPECT_LE(t.span_s, wall);
  return t;
}

TEST(CudaTimeline, TheHostsPauseBetweenOpsIsIdle) {
  std::string why;
  auto be = timed_backend(true, &why);
  if (!be) GTEST_SKIP() << why;
  EXPECT_EQ(matmul_pause_then(*be, [&](Matmul& mm) { mm.run(*be); }).ops, 2);
  // the window's base moved on to a later event whenever one ends over 1 ms after it
  cuda::StreamTimeline::rebase_after_for_test(1e-3);
  const StreamTimes t = matmul_pause_then(*be, [&](Matmul& mm) { mm.run(*be); });
  cuda::StreamTimeline::rebase_after_for_test(4.0);
  EXPECT_EQ(t.ops, 2);
}

// A cast of a tensor onto itself submits nothing: no piece (counted from the last one's end it
// would cover the pause).
TEST(CudaTimeline, AnOpThatSubmitsNothingAddsNoPiece) {
  std::string why;
  auto be = timed_backend(true, &why);
  if (!be) GTEST_SKIP() << why;
  const StreamTimes t = matmul_pause_then(*be, [&](Matmul& mm) {
    Tensor y = mm.ty();
    be->cast(y, y);
  });
  EXPECT_EQ(t.ops, 1);
}

TEST(CudaTimeline, TheSameBitsAsWithout) {
  std::string why;
  std::vector<float> out[2];
  for (const bool on : {false, true}) {
    auto be = timed_backend(on, &why);
    if (!be) GTEST_SKIP() << why;
    Matmul mm(*be, 96, 160);
    mm.run(*be);
    Tensor y = mm.ty();
    be->add(y, mm.ty());
    out[on] = mm.result(*be);
  }
  ASSERT_EQ(out[0].size(), out[1].size());
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4), 0);
}

TEST(CudaTimeline, RefusedBesideTheOpProfile) {
  std::string why;
  if (!timed_backend(false, &why)) GTEST_SKIP() << why;
  const ScopedEnv profile("OOMB_CUDA_PROFILE", "1");
  EXPECT_THAT(error_of([&] { timed_backend(true, nullptr); }),
              ::testing::HasSubstr("OOMB_CUDA_TIMELINE and OOMB_CUDA_PROFILE"));
}

// A copy of 256 MiB from pinned memory issued on the copy stream while the compute stream runs a
// few hundred milliseconds of fp32 GEMMs: most of the copy counted as hidden behind them.
TEST(CudaTimeline, ACopyBesideKernelsCountsAsHidden) {
  std::string why;
  auto be = overlapping_backend(&why);
  if (!be) GTEST_SKIP() << why;
  Matmul mm(*be, 4096, 4096);
  Transfer tr(size_t(256) << 20);
  mm.run(*be);  // (cuBLASLt's plan made outside the window)
  be->synchronize();
  be->take_stream_times();
  for (int i = 0; i < 40; ++i) mm.run(*be);
  tr.up(*be);
  const StreamTimes t = be->take_stream_times();
  expect_adds_up(t);
  EXPECT_EQ(t.copies, 1);
  EXPECT_GT(t.compute_s, t.copy_s);
  EXPECT_GT(t.both_s, 0.9 * t.copy_s);
}

// 256 MiB up on the copy stream and 256 MiB down on the copy-out stream, issued together: the two
// directions run at once (PCIe is full duplex; a GPU has a copy engine each way), most of each
// counted as both ways at once. The rates are printed: what --offload params can move a second.
TEST(CudaTimeline, CopiesBothWaysRunAtOnce) {
  std::string why;
  auto be = overlapping_backend(&why);
  if (!be) GTEST_SKIP() << why;
  Transfer a(size_t(256) << 20), b(size_t(256) << 20);
  a.up(*be), b.down(*be);  // (first touches outside the window)
  be->synchronize();
  be->take_stream_times();
  a.up(*be);
  b.down(*be);
  const StreamTimes t = be->take_stream_times();
  expect_adds_up(t);
  EXPECT_EQ(t.copies, 2);
  std::cout << "in " << double(a.bytes) / t.copy_in_s / 1e9 << " GB/s, out " << double(b.bytes) / t.copy_out_s / 1e9
            << " GB/s, both in " << t.copy_s << " s" << std::endl;
  EXPECT_GT(t.duplex_s, 0.5 * std::min(t.copy_in_s, t.copy_out_s));
}
