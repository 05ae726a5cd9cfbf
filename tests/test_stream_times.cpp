// backend/stream_times.h: the compute and two copy streams' busy pieces into busy, at once and idle
// seconds, against hand-worked windows and against a fine grid that counts every instant directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/stream_times.h"

using namespace oomb;

TEST(StreamTimes, AHandWorkedWindow) {
  // compute busy [0, 1) and [2, 3); the copy stream [0.5, 2.5): each 1 s of it behind compute
  const StreamTimes t = stream_times({{0, 1}, {2, 3}}, {{0.5, 2.5}}, {}, 4);
  EXPECT_TRUE(t.on);
  EXPECT_DOUBLE_EQ(t.compute_s, 2);
  EXPECT_DOUBLE_EQ(t.copy_s, 2);
  EXPECT_DOUBLE_EQ(t.both_s, 1);
  EXPECT_DOUBLE_EQ(t.idle_s, 1);  // [3, 4)
  EXPECT_DOUBLE_EQ(t.span_s, 4);
  EXPECT_EQ(t.ops, 2);
  EXPECT_EQ(t.copies, 1);
}

TEST(StreamTimes, PiecesThatTouchOrOverlapCountOnceInAnyOrder) {
  const StreamTimes t = stream_times({{1, 2}, {0, 1}, {0.5, 1.5}, {5, 6}}, {{4, 7}}, {{4.5, 5}}, 8);
  EXPECT_DOUBLE_EQ(t.compute_s, 3);  // [0, 2) and [5, 6)
  EXPECT_DOUBLE_EQ(t.copy_s, 3);     // [4, 7)
  EXPECT_DOUBLE_EQ(t.copy_in_s, 3);
  EXPECT_DOUBLE_EQ(t.copy_out_s, 0.5);
  EXPECT_DOUBLE_EQ(t.duplex_s, 0.5);  // [4.5, 5)
  EXPECT_DOUBLE_EQ(t.both_s, 1);     // [5, 6)
  EXPECT_DOUBLE_EQ(t.idle_s, 3);     // [2, 4) and [7, 8)
  EXPECT_EQ(t.ops, 4);
  EXPECT_EQ(t.copies, 2);
}

TEST(StreamTimes, AnEmptyWindowIsIdle) {
  const StreamTimes t = stream_times({}, {}, {}, 0.25);
  EXPECT_TRUE(t.on);
  EXPECT_EQ(t.compute_s + t.copy_s + t.both_s, 0);
  EXPECT_DOUBLE_EQ(t.idle_s, 0.25);
  EXPECT_FALSE(StreamTimes{}.on);
}

TEST(StreamTimes, WindowsAdd) {
  StreamTimes a = stream_times({{0, 1}}, {{0, 2}}, {{1, 3}}, 3), b = stream_times({{0, 1}}, {}, {{0, 0.5}}, 1.5);
  a += b;
  EXPECT_DOUBLE_EQ(a.compute_s, 2);
  EXPECT_DOUBLE_EQ(a.copy_s, 3.5);     // [0, 3) and [0, 0.5)
  EXPECT_DOUBLE_EQ(a.copy_in_s, 2);
  EXPECT_DOUBLE_EQ(a.copy_out_s, 2.5);
  EXPECT_DOUBLE_EQ(a.duplex_s, 1);     // [1, 2)
  EXPECT_DOUBLE_EQ(a.both_s, 1.5);     // [0, 1) and [0, 0.5)
  EXPECT_DOUBLE_EQ(a.idle_s, 0.5);     // [1, 1.5) of the second
  EXPECT_DOUBLE_EQ(a.span_s, 4.5);
  EXPECT_EQ(a.ops, 2);
  EXPECT_EQ(a.copies, 3);
}

// Random pieces on a grid of 1/64 s, each instant's state counted directly.
TEST(StreamTimes, AgreesWithCountingEveryInstant) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    constexpr int kCells = 256;
    bool busy[3][kCells] = {};  // compute, copies in, copies out
    std::vector<Busy> pieces[3];
    for (int s = 0; s < 3; ++s) {
      const int n = int(rng() % 8);
      for (int i = 0; i < n; ++i) {
        const int a = int(rng() % kCells), len = int(rng() % 40);
        const int b = std::min(kCells, a + len);
        pieces[s].push_back({a / 64.0, b / 64.0});
        for (int c = a; c < b; ++c) busy[s][c] = true;
      }
    }
    double compute = 0, copy = 0, in = 0, out = 0, duplex = 0, both = 0, idle = 0;
    for (int c = 0; c < kCells; ++c) {
      const bool copying = busy[1][c] || busy[2][c];
      compute += busy[0][c] / 64.0, copy += copying / 64.0, in += busy[1][c] / 64.0, out += busy[2][c] / 64.0;
      duplex += (busy[1][c] && busy[2][c]) / 64.0;
      both += (busy[0][c] && copying) / 64.0, idle += (!busy[0][c] && !copying) / 64.0;
    }
    const StreamTimes t = stream_times(pieces[0], pieces[1], pieces[2], kCells / 64.0);
    SCOPED_TRACE(trial);
    EXPECT_DOUBLE_EQ(t.compute_s, compute);
    EXPECT_DOUBLE_EQ(t.copy_s, copy);
    EXPECT_DOUBLE_EQ(t.copy_in_s, in);
    EXPECT_DOUBLE_EQ(t.copy_out_s, out);
    EXPECT_DOUBLE_EQ(t.duplex_s, duplex);
    EXPECT_DOUBLE_EQ(t.both_s, both);
    EXPECT_DOUBLE_EQ(t.idle_s, idle);
  }
}
