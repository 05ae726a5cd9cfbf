// backend/attention_flops.h: the visible pairs in closed form against counting them one by one,
// and a call's FLOPs over blocks with kv-head masks.
#include <gtest/gtest.h>

#include <vector>

#include "backend/attention_flops.h"

using namespace oomb;

namespace {

int64_t counted_pairs(int64_t q0, int64_t T, int64_t k0, int64_t len, int64_t window) {
  int64_t n = 0;
  for (int64_t i = q0; i < q0 + T; ++i)
    for (int64_t j = k0; j < k0 + len; ++j) n += j <= i && (window <= 0 || j > i - window) ? 1 : 0;
  return n;
}

KVBlock block(std::vector<float>& store, int64_t idx0, int64_t len, int64_t G, uint64_t heads = ~uint64_t(0)) {
  KVBlock b;
  b.k = Tensor(store.data(), DType::F32, {len, G, 1}, Tier::Host);
  b.v = b.k;
  b.idx0 = idx0;
  b.heads = heads;
  return b;
}

}  // namespace

TEST(AttentionFlops, VisiblePairsEqualCountingThemOneByOne) {
  int cases = 0;
  for (int64_t q0 : {0, 3, 17, 40})
    for (int64_t T : {0, 1, 5, 16})
      for (int64_t k0 : {0, 2, 16, 30, 60})
        for (int64_t len : {0, 1, 7, 16})
          for (int64_t window : {0, 1, 4, 9, 100}) {
            ASSERT_EQ(visible_pairs(q0, T, k0, len, window), counted_pairs(q0, T, k0, len, window))
                << "q0=" << q0 << " T=" << T << " k0=" << k0 << " len=" << len << " window=" << window;
            ++cases;
          }
  EXPECT_EQ(cases, 4 * 4 * 5 * 4 * 5);
}

TEST(AttentionFlops, ACallCountsItsBlocksHeadsAndPasses) {
  std::vector<float> store(64);
  AttnArgs a;
  a.q_idx0 = 16;
  const int64_t T = 8, H = 6, D = 4, G = 3;  // 2 query heads a kv head
  // keys 0..15 (every query sees all 16), 16..23 (the chunk's own: 36 pairs), kv head 1 masked out of the first
  const std::vector<KVBlock> blocks{block(store, 0, 16, G, ~uint64_t(0) ^ 2), block(store, 16, 8, G)};
  const double pairs = 8.0 * 16 * 2 * 2 + 36.0 * 3 * 2;  // (queries x keys x kv heads read x 2 query heads each)
  EXPECT_EQ(attention_flops(a, T, H, D, blocks, false), 4.0 * D * pairs);
  EXPECT_EQ(attention_flops(a, T, H, D, blocks, true), 10.0 * D * pairs);
  // a window of 4: each query sees its own key and the 3 before. Queries 16, 17, 18 see 3, 2, 1 keys of
  // the first block (two kv heads read it) and 1, 2, 3 of their own; queries 19..23 4 of their own.
  a.window = 4;
  EXPECT_EQ(attention_flops(a, T, H, D, blocks, false), 4.0 * D * ((3 + 2 + 1) * 2 * 2 + (1 + 2 + 3 + 5 * 4) * 3 * 2));
}
