// Page-sparse attention (--sparse-pages): the choice (scores, top K with ties to the lower page,
// sinks, per group or shared, runs), the page metadata (mean keys; Quest's min/max) and the ops
// against formulas written here, exactness (K covering every earlier page
// gives dense attention's bits; otherwise loss and every gradient equal PyTorch float64's dense
// attention under an explicit mask written from the engine's recorded choice), offload moving only
// the chosen pages, the memory the device keeps per token, and errors naming the flag.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "data/repeat_task.h"
#include "dtype_reference.h"
#include "hf/safetensors.h"
#include "kv/page_meta.h"
#include "kv/sparse_select.h"
#include "model/init.h"
#include "train/model.h"
#include "train/trainer.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

// ---- the choice ----

// Fills a bf16 tensor from small integers (exact in bf16).
void fill_bf16(Tensor& t, const std::vector<int>& v) {
  for (size_t i = 0; i < v.size(); ++i) t.as<uint16_t>()[i] = f32_to_bf16(float(v[i]));
}

TEST(SparseSelect, TopKPerGroupWithSinksAndTiesToTheLowerPage) {
  auto be = make_cpu_backend();
  const int64_t G = 2, H = 4, D = 2, P = 4, pages = 8, T = 8, tile = 4;
  const KVShape kv{1, G, D, P, DType::F32};
  SparseOptions o;
  o.pages = 2, o.tile = tile, o.sinks = 1;
  SparseSelector sel(o, kv, *be);
  const int64_t N = 40, C = 8, begin = 32;  // chunks at 0, 8, 16, 24, 32: the last has 8 earlier pages
  sel.begin_sequence(N, C, true);
  // means (pages, G, D): group 0 likes dimension 0, group 1 dimension 1
  Buffer mb(Tier::Host, Tag::IO, size_t(pages * G * D * 2));
  Tensor means(mb.data(), DType::BF16, {pages, G, D});
  std::vector<int> m(size_t(pages * G * D));
  const int k0[pages] = {9, 1, 5, 7, 7, 2, 0, 3};  // page 0 is a sink whatever it scores; 3 and 4 tie
  const int k1[pages] = {0, 8, 1, 2, 3, 4, 6, 6};  // 6 and 7 tie
  for (int64_t p = 0; p < pages; ++p) {
    m[size_t((p * G + 0) * D + 0)] = k0[p];
    m[size_t((p * G + 1) * D + 1)] = k1[p];
  }
  fill_bf16(means, m);
  // q (T, H, D): every query of tile 0 and 1 points along dimension 0 for heads 0-1 (group 0) and
  // dimension 1 for heads 2-3 (group 1); tile 1's group 1 points the other way
  std::vector<float> q(size_t(T * H * D), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) q[size_t((t * H + h) * D + (h < 2 ? 0 : 1))] = (h >= 2 && t >= tile) ? -1.0f : 1.0f;
  const Tensor qt(q.data(), DType::F32, {T, H, D});
  const auto runs = sel.choose(0, begin, qt, means, 0);
  // group 0: scores ∝ k0 over pages 1..7 -> 3 and 4 (7, 7) beat 2 (5); plus sink 0
  EXPECT_EQ(sel.recorded(0, begin, 0, 0), (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(sel.recorded(0, begin, 1, 0), (std::vector<int64_t>{0, 3, 4}));
  // group 1, tile 0: k1 over pages 1..7 -> 1 (8), then 6 and 7 tie at 6: the lower page, 6
  EXPECT_EQ(sel.recorded(0, begin, 0, 1), (std::vector<int64_t>{0, 1, 6}));
  // group 1, tile 1 (negated): the lowest k1 -> 2 (1) then 3 (2)
  EXPECT_EQ(sel.recorded(0, begin, 1, 1), (std::vector<int64_t>{0, 2, 3}));
  ASSERT_EQ(runs.size(), 2u) << "two tiles with different choices: two runs";
  EXPECT_EQ(runs[0].q0, 0);
  EXPECT_EQ(runs[0].q1, 4);
  EXPECT_EQ(std::vector<int64_t>(runs[0].pages.begin(), runs[0].pages.end()), (std::vector<int64_t>{0, 1, 3, 4, 6}));
  EXPECT_EQ(std::vector<uint64_t>(runs[0].heads.begin(), runs[0].heads.end()),
            (std::vector<uint64_t>{3, 2, 1, 1, 2}));  // page 0 both groups, 1 and 6 group 1, 3 and 4 group 0
  EXPECT_EQ(std::vector<int64_t>(runs[1].pages.begin(), runs[1].pages.end()), (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(std::vector<uint64_t>(runs[1].heads.begin(), runs[1].heads.end()), (std::vector<uint64_t>{3, 2, 3, 1}));
  // the backward sweep's recall gives the same runs
  const auto again = sel.recall(0, begin, T);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_TRUE(std::equal(again[1].pages.begin(), again[1].pages.end(), runs[1].pages.begin()));
}

TEST(SparseSelect, SharedSumsEveryHeadAndEqualTilesMergeIntoOneRun) {
  auto be = make_cpu_backend();
  const int64_t G = 2, H = 4, D = 2, P = 4, pages = 6, T = 8, tile = 2;
  const KVShape kv{1, G, D, P, DType::F32};
  SparseOptions o;
  o.pages = 1, o.tile = tile, o.sinks = 0, o.shared = true;
  SparseSelector sel(o, kv, *be);
  sel.begin_sequence(32, 8, true);  // chunks at 0, 8, 16, 24
  Buffer mb(Tier::Host, Tag::IO, size_t(pages * G * D * 2));
  Tensor means(mb.data(), DType::BF16, {pages, G, D});
  // group 0 alone prefers page 1 (4 vs 3), group 1 alone page 2 (5 vs 1); summed: page 2 (3 + 5 = 8 > 4 + 1)
  std::vector<int> m(size_t(pages * G * D), 0);
  m[size_t((1 * G + 0) * D)] = 4, m[size_t((1 * G + 1) * D)] = 1;
  m[size_t((2 * G + 0) * D)] = 3, m[size_t((2 * G + 1) * D)] = 5;
  fill_bf16(means, m);
  std::vector<float> q(size_t(T * H * D), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) q[size_t((t * H + h) * D)] = 1.0f;
  const Tensor qt(q.data(), DType::F32, {T, H, D});
  const auto runs = sel.choose(0, 24, qt, means, 0);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(sel.recorded(0, 24, i, 0), (std::vector<int64_t>{2}));
  ASSERT_EQ(runs.size(), 1u) << "four tiles choosing the same page: one run";
  EXPECT_EQ(runs[0].q1, T);
  EXPECT_EQ(runs[0].heads[0], ~uint64_t(0));
}

// NaN scores lose to every number (the order stays a strict total order).
TEST(SparseSelect, NonFiniteScoresNeverWin) {
  auto be = make_cpu_backend();
  const KVShape kv{1, 1, 2, 4, DType::F32};
  SparseOptions o;
  o.pages = 1, o.tile = 4, o.sinks = 0;
  SparseSelector sel(o, kv, *be);
  sel.begin_sequence(16, 4, true);
  Buffer mb(Tier::Host, Tag::IO, 3 * 2 * 2);
  Tensor means(mb.data(), DType::BF16, {3, 1, 2});
  fill_bf16(means, {1, 0, 2, 0, 1, 0});
  means.as<uint16_t>()[2] = 0x7fc0;  // page 1: NaN
  std::vector<float> q(4 * 1 * 2, 0.0f);
  for (int t = 0; t < 4; ++t) q[size_t(t * 2)] = 1.0f;
  const Tensor qt(q.data(), DType::F32, {4, 1, 2});
  sel.choose(0, 12, qt, means, 0);
  EXPECT_EQ(sel.recorded(0, 12, 0, 0), (std::vector<int64_t>{0}));  // 0 and 2 tie; NaN page 1 loses
}

// The mean key per page over two writes (the page straddles them): values whose means bf16 holds exactly.
TEST(PageMeta, MeanKeyPerPageAcrossWrites) {
  auto be = make_cpu_backend();
  const KVShape kv{1, 1, 2, 4, DType::F32};
  PageMeta meta(kv, *be);
  meta.reserve(8);
  std::vector<float> a = {1, -8, 3, -8}, b = {5, 16, 7, 16, 100, 2, 102, 4};  // rows of (G=1, D=2)
  meta.write(0, 0, Tensor(a.data(), DType::F32, {2, 1, 2}));
  Tensor m = meta.meta(0, 2);
  EXPECT_EQ(bf16_to_f32(m.as<uint16_t>()[0]), 2.0f);
  EXPECT_EQ(bf16_to_f32(m.as<uint16_t>()[1]), -8.0f);
  meta.write(0, 2, Tensor(b.data(), DType::F32, {4, 1, 2}));  // rows 2, 3 of page 0 and 0, 1 of page 1
  EXPECT_EQ(bf16_to_f32(m.as<uint16_t>()[0]), 4.0f);   // (1 + 3 + 5 + 7) / 4
  EXPECT_EQ(bf16_to_f32(m.as<uint16_t>()[1]), 4.0f);   // (-8 - 8 + 16 + 16) / 4
  EXPECT_EQ(bf16_to_f32(m.as<uint16_t>()[2]), 101.0f);
  EXPECT_EQ(bf16_to_f32(m.as<uint16_t>()[3]), 3.0f);
}

// ---- Quest's metadata and score, top-K: the ops against formulas written here ----

// The bf16 value next to x downward (the largest <= x) or upward, by search over the patterns
// around the nearest one (decoded by dtype_reference.h, not by core/dtype).
uint16_t bf16_toward(double x, bool up) {
  const uint16_t c = ref::bf16_encode(float(x));
  uint16_t best = c;
  bool found = false;
  for (int dlt = -2; dlt <= 2; ++dlt) {
    const uint16_t h = uint16_t(c + dlt);
    const double v = ref::bf16_value(h);
    if (std::isnan(v) || (up ? v < x : v > x)) continue;
    if (!found || (up ? v < ref::bf16_value(best) : v > ref::bf16_value(best))) best = h, found = true;
  }
  return best;
}

// Per page and element: the min of its keys rounded down to bf16, the max rounded up, across two
// writes that split pages; random keys (almost none exact in bf16) against the formula in float64.
TEST(PageMeta, QuestMinMaxPerPageAcrossWritesRoundsOutward) {
  auto be = make_cpu_backend();
  const int64_t G = 2, D = 3, P = 4, N = 14;
  const KVShape kv{1, G, D, P, DType::F32};
  PageMeta meta(kv, *be, PageScore::Quest);
  meta.reserve(N);
  const std::vector<float> keys = randn(size_t(N * G * D), 71, 3.0f);
  meta.write(0, 0, Tensor(const_cast<float*>(keys.data()), DType::F32, {6, G, D}));  // pages 0 and half of 1
  meta.write(0, 6, Tensor(const_cast<float*>(keys.data()) + 6 * G * D, DType::F32, {N - 6, G, D}));
  const Tensor m = meta.meta(0, 4);
  ASSERT_EQ(m.shape_str(), "(4, 2, 2, 3)");
  int inexact = 0;
  for (int64_t p = 0; p < 4; ++p)
    for (int64_t e = 0; e < G * D; ++e) {
      double lo = INFINITY, hi = -INFINITY;
      for (int64_t t = p * P; t < std::min(N, p * P + P); ++t) {
        lo = std::min(lo, double(keys[size_t(t * G * D + e)]));
        hi = std::max(hi, double(keys[size_t(t * G * D + e)]));
      }
      const uint16_t got_lo = m.as<uint16_t>()[(p * 2 + 0) * G * D + e], got_hi = m.as<uint16_t>()[(p * 2 + 1) * G * D + e];
      EXPECT_EQ(got_lo, bf16_toward(lo, false)) << "page " << p << " element " << e << " min " << lo;
      EXPECT_EQ(got_hi, bf16_toward(hi, true)) << "page " << p << " element " << e << " max " << hi;
      inexact += ref::bf16_value(got_lo) != lo;
    }
  EXPECT_GT(inexact, 20) << "the keys were exact in bf16: the rounding direction went untested";
}

// Quest's score against sum over queries, heads and dims of max(q min, q max) in float64, per group
// and shared; the control (q . the midpoint, a mean-like score) misses the bound by far.
TEST(SparseOps, QuestScoresAgainstTheFormula) {
  auto be = make_cpu_backend();
  const int64_t T = 37, H = 6, G = 3, D = 8, pages = 9, tile = 16, tiles = 3, group = H / G;
  std::vector<float> q = randn(size_t(T * H * D), 72);
  std::vector<uint16_t> mm(size_t(pages * 2 * G * D));
  const std::vector<float> a = randn(mm.size() / 2, 73), b = randn(mm.size() / 2, 74);
  for (int64_t p = 0; p < pages; ++p)
    for (int64_t e = 0; e < G * D; ++e) {
      const float x = a[size_t(p * G * D + e)], y = b[size_t(p * G * D + e)];
      mm[size_t((p * 2 + 0) * G * D + e)] = f32_to_bf16_down(std::min(x, y));
      mm[size_t((p * 2 + 1) * G * D + e)] = f32_to_bf16_up(std::max(x, y));
    }
  const Tensor qt(q.data(), DType::F32, {T, H, D}), mt(mm.data(), DType::BF16, {pages, 2, G, D});
  for (int64_t S : {G, int64_t(1)}) {
    std::vector<float> got(size_t(tiles * S * pages));
    Tensor st(got.data(), DType::F32, {tiles, S, pages});
    be->page_quest_scores(qt, tile, mt, st);
    std::vector<float> want(got.size()), control(got.size());
    for (int64_t i = 0; i < tiles; ++i)
      for (int64_t p = 0; p < pages; ++p)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t g = h / group, s = S == 1 ? 0 : g;
          double w = 0, c = 0;
          for (int64_t t = i * tile; t < std::min(T, i * tile + tile); ++t)
            for (int64_t d = 0; d < D; ++d) {
              const double qv = q[size_t((t * H + h) * D + d)];
              const double lo = ref::bf16_value(mm[size_t((p * 2 + 0) * G * D + g * D + d)]);
              const double hi = ref::bf16_value(mm[size_t((p * 2 + 1) * G * D + g * D + d)]);
              w += std::max(qv * lo, qv * hi);
              c += qv * (lo + hi) / 2;
            }
          want[size_t((i * S + s) * pages + p)] += float(w);
          control[size_t((i * S + s) * pages + p)] += float(c);
        }
    const double e = rel_error(got, want), off = rel_error(control, want);
    EXPECT_LE(e, 2.5e-7) << "S " << S;  // 6.2e-8 and 6.5e-8 measured (fp32 sums in another order)
    EXPECT_GT(off, 1e-1) << "the midpoint score met the bound: the test is blind";
    std::cout << fmt::format("[ sparse   ] page_quest_scores S={}: rel. error {:.1e} (control {:.1e})\n", S, e, off);
  }
}

// Top K of one row under (score descending, page ascending), NaN as -inf, -0 equal to +0.
TEST(SparseOps, TopKTiesNaNAndFewCandidates) {
  auto be = make_cpu_backend();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> sc = {1, nan, 3, 3, -0.0f, 0.0f, -inf, 3};  // pages 0..7, candidates from 1
  auto top = [&](int64_t K, int64_t first) {
    std::vector<int32_t> out(size_t(K), 7777);
    Tensor ct(out.data(), DType::I32, {1, 1, K});
    be->page_topk(Tensor(sc.data(), DType::F32, {1, 1, 8}), first, ct);
    return out;
  };
  EXPECT_EQ(top(3, 1), (std::vector<int32_t>{2, 3, 7}));
  EXPECT_EQ(top(4, 1), (std::vector<int32_t>{2, 3, 4, 7}));        // -0 ties +0: the lower page
  EXPECT_EQ(top(6, 1), (std::vector<int32_t>{1, 2, 3, 4, 5, 7}));  // NaN ties -inf: the lower page
  EXPECT_EQ(top(4, 0), (std::vector<int32_t>{0, 2, 3, 7}));
  EXPECT_EQ(top(7, 1), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(top(9, 1), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, -1, -1}));  // fewer candidates than K
  EXPECT_EQ(top(2, 8), (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(error_of([&] { top(2, 9); }), "page_topk: first page 9 outside the 8 pages of scores");
}

// Random rows with many ties and NaNs (tiles x groups rows) against a full sort of each row.
TEST(SparseOps, TopKAgainstAFullSort) {
  auto be = make_cpu_backend();
  const int64_t tiles = 5, S = 3, pages = 300, K = 17, first = 2;
  std::vector<float> sc(size_t(tiles * S * pages));
  uint64_t x = 5;
  for (float& v : sc) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int r = int((x >> 33) % 13);
    v = r == 0 ? std::numeric_limits<float>::quiet_NaN() : float(r % 6) - 2.0f;  // 6 values: ties everywhere
  }
  std::vector<int32_t> got(size_t(tiles * S * K));
  Tensor ct(got.data(), DType::I32, {tiles, S, K});
  be->page_topk(Tensor(sc.data(), DType::F32, {tiles, S, pages}), first, ct);
  for (int64_t r = 0; r < tiles * S; ++r) {
    std::vector<std::pair<double, int64_t>> all;  // (-score, page): ascending = the order wanted
    for (int64_t p = first; p < pages; ++p) {
      const float v = sc[size_t(r * pages + p)];
      all.push_back({std::isnan(v) ? INFINITY : -double(v), p});
    }
    std::sort(all.begin(), all.end());
    std::vector<int32_t> want;
    for (int64_t j = 0; j < K; ++j) want.push_back(int32_t(all[size_t(j)].second));
    std::sort(want.begin(), want.end());
    EXPECT_EQ(std::vector<int32_t>(got.begin() + r * K, got.begin() + (r + 1) * K), want) << "row " << r;
  }
}

// The same keys, scored both ways: the mean prefers the page of mean 1 (keys 1, 1); Quest's bound
// the page whose keys spread to 5 (keys -5, 5: mean 0).
TEST(SparseSelect, QuestBoundPrefersTheWidePage) {
  auto be = make_cpu_backend();
  const KVShape kv{1, 1, 2, 2, DType::F32};  // 1 layer, 1 kv head of dim 2, pages of 2 tokens
  const std::vector<float> keys = {0, 0, 0, 0, -5, 0, 5, 0, 1, 0, 1, 0, 0.5f, 0, 0.5f, 0};  // pages 0..3
  const Tensor kt(const_cast<float*>(keys.data()), DType::F32, {8, 1, 2});
  std::vector<float> q(2 * 2, 0.0f);
  q[0] = q[2] = 1.0f;  // two queries along dimension 0
  const Tensor qt(q.data(), DType::F32, {2, 1, 2});
  for (PageScore score : {PageScore::Mean, PageScore::Quest}) {
    SparseOptions o;
    o.pages = 1, o.tile = 2, o.sinks = 0, o.score = score;
    SparseSelector sel(o, kv, *be);
    sel.begin_sequence(10, 2, true);
    PageMeta meta(kv, *be, score);
    meta.reserve(10);
    meta.write(0, 0, kt);
    sel.choose(0, 8, qt, meta.meta(0, 4), 0);
    EXPECT_EQ(sel.recorded(0, 8, 0, 0), (std::vector<int64_t>{score == PageScore::Quest ? 1 : 2}))
        << page_score_name(score);
  }
}

// ---- errors ----

TEST(SparseOptionsCheck, BadInputNamesTheFlag) {
  EXPECT_EQ(error_of([] { sparse_options(0, 128, 1, false, "mean", 1024, 4); }),
            "--sparse-pages: must be at least 1 (the earlier pages each query tile reads), got 0");
  EXPECT_EQ(error_of([] { sparse_options(8, 256, 1, false, "mean", 128, 4); }),
            "--sparse-tile 256: larger than the chunk (128 tokens, --chunk-size)");
  EXPECT_EQ(error_of([] { sparse_options(8, 0, 1, false, "mean", 128, 4); }), "--sparse-tile: must be at least 1, got 0");
  EXPECT_EQ(error_of([] { sparse_options(8, 64, -1, false, "mean", 128, 4); }), "--sink-pages: must be 0 or more, got -1");
  EXPECT_EQ(error_of([] { sparse_options(8, 64, 1, false, "quest2", 128, 4); }),
            "--sparse-score: 'quest2' is not a known score (known: mean, quest)");
  EXPECT_EQ(sparse_options(8, 64, 1, false, "quest", 128, 4).score, PageScore::Quest);
  EXPECT_EQ(error_of([] { sparse_options(-1, 64, 1, false, "mean", 128, 4); }), "(no error)");  // not given: dense
  EXPECT_FALSE(sparse_options(-1, 64, 1, false, "mean", 128, 4).on());
}

// ---- exactness ----

struct Step {
  double loss;
  std::vector<float> grads;
};

Step step(Backend& be, const std::filesystem::path& dir, const std::vector<int32_t>& ids,
          const std::vector<int32_t>& tg, const ChunkPlan& plan, Model** keep = nullptr) {
  const ModelConfig cfg = load_config(dir);
  auto m = std::make_unique<Model>(cfg, be, plan);
  load_for_training(*m, dir);
  const LossStats ls = m->forward_backward(ids.data(), tg.data(), int64_t(ids.size()), 1.0f);
  Step s{ls.loss_sum / double(ls.targets), host_grads(*m)};
  if (keep) *keep = m.release();
  return s;
}

bool same_bits(const Step& a, const Step& b) {
  return std::memcmp(&a.loss, &b.loss, sizeof a.loss) == 0 && a.grads.size() == b.grads.size() &&
         std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4) == 0;
}

std::vector<int32_t> tokens(int64_t n, uint64_t seed, int32_t eos = -1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t x = seed;
  for (auto& v : t) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    v = int32_t((x >> 33) % 61);
    if (v == 3) v = 4;  // separators only where placed
  }
  if (eos >= 0)
    for (int64_t at : {23, 70, 71, 118}) t[size_t(std::min(at, n - 1))] = eos;
  return t;
}

SparseOptions sparse(int64_t K, int64_t tile, int64_t S, bool shared, PageScore score = PageScore::Mean) {
  SparseOptions o;
  o.pages = K, o.tile = tile, o.sinks = S, o.shared = shared, o.score = score;
  return o;
}

class SparseModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(temp_dir("_sparse"));
    write_tiny_model(*dir_, tiny_config_json("qwen2", 2), 21);
    granite_ = new std::filesystem::path(temp_dir("_sparse_granite"));
    write_tiny_model(*granite_, tiny_granite_json(2), 22);
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete granite_;
  }
  static std::filesystem::path *dir_, *granite_;
};
std::filesystem::path *SparseModel::dir_ = nullptr, *SparseModel::granite_ = nullptr;

// K >= the earlier pages: every tile reads every page, one run per chunk, the bits of dense
// attention (per group and shared, with --doc-mask, bf16 pages, on the CPU and offloaded on the
// simulated device). K = 1 does differ, so the comparison can fail.
TEST_F(SparseModel, KCoveringEveryPageIsBitwiseDense) {
  const int64_t N = 150;
  int compared = 0;
  for (bool docs : {false, true})
    for (DType kv : {DType::F32, DType::BF16}) {
      const auto t = tokens(N + 1, 5, docs ? 3 : -1);
      const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
      ChunkPlan dense{40, 16, DType::F32, docs ? 3 : -1};
      dense.kv_dtype = kv;
      auto cpu = make_cpu_backend();
      const Step ref = step(*cpu, *dir_, ids, tg, dense);
      for (bool shared : {false, true})
        for (int64_t tile : {8, 40})
          for (PageScore score : {PageScore::Mean, PageScore::Quest}) {
            if (score == PageScore::Quest && kv != DType::F32) continue;
            SCOPED_TRACE(fmt::format("docs {} kv {} shared {} tile {} {}", docs, dtype_name(kv), shared, tile,
                                     page_score_name(score)));
            ChunkPlan sp = dense;
            sp.sparse = sparse(10, tile, 1, shared, score);  // N = 150 has 10 pages: K covers every earlier page
            EXPECT_TRUE(same_bits(ref, step(*cpu, *dir_, ids, tg, sp))) << "cpu";
            auto sim = make_sim_backend(0, 0);
            sp.offload_kv = true;
            sp.offload_group = 2;
            EXPECT_TRUE(same_bits(ref, step(*sim, *dir_, ids, tg, sp))) << "sim, offloaded";
            sp.offload_kv = false;
            sp.offload_group = 0;
            sp.sparse.pages = 1;
            EXPECT_FALSE(same_bits(ref, step(*cpu, *dir_, ids, tg, sp))) << "K = 1 gave dense bits: the test is blind";
            ++compared;
          }
    }
  std::cout << fmt::format("[ sparse   ] {} configurations bitwise dense with K >= the earlier pages\n", compared);
}

// Offloaded sparse equals resident sparse bit for bit (only the chosen pages stream through).
TEST_F(SparseModel, OffloadedBitwiseIdenticalToResident) {
  const int64_t N = 190;
  const auto t = tokens(N + 1, 9, 3);
  const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
  for (PageScore score : {PageScore::Mean, PageScore::Quest})
    for (bool shared : {false, true})
      for (int64_t group : {1, 2, 0}) {
        SCOPED_TRACE(fmt::format("{} shared {} group {}", page_score_name(score), shared, group));
        ChunkPlan p{48, 16, DType::F32, 3};
        p.sparse = sparse(2, 16, 1, shared, score);
        auto sim = make_sim_backend(0, group == 2 ? 200 : 0);
        const Step resident = step(*sim, *dir_, ids, tg, p);
        p.offload_kv = true;
        p.offload_group = group;
        EXPECT_TRUE(same_bits(resident, step(*sim, *dir_, ids, tg, p)));
      }
}

// The choice of layer l's chunk at `begin`, tile i, kv head g, as an explicit mask over keys for
// every query: PyTorch float64's dense attention under it must give the engine's loss and every
// gradient (1e-5 relative). The mask: the query's own chunk causally, and the earlier pages its
// tile chose for its kv head group (documents and causality are the oracle's own).
struct MaskCase {
  int64_t tile, K, S;
  bool shared, docs;
  PageScore score = PageScore::Mean;
  bool granite = false;  // the Granite model (its multipliers; attention's scale attention_multiplier)
};

TEST_F(SparseModel, EqualsDenseAttentionUnderTheRecordedMask) {
  std::string why;
  if (!torch_available(&why)) OOMB_MISSING_REFERENCE(why);
  const int64_t N = 160, C = 64, P = 16;  // chunks at 0, 32, 96: 2 and 6 earlier pages
  const MaskCase cases[] = {{16, 1, 1, false, false}, {32, 2, 0, false, false}, {64, 3, 1, false, true},
                            {16, 2, 2, true, false},  {8, 1, 0, true, true},    {32, 4, 1, false, true},
                            {16, 1, 1, false, false, PageScore::Quest}, {8, 2, 0, true, true, PageScore::Quest},
                            {32, 4, 1, false, true, PageScore::Quest},
                            {16, 2, 1, false, true, PageScore::Mean, true}, {8, 1, 0, true, false, PageScore::Quest, true}};
  double worst_loss = 0, worst_grad = 0;
  for (const MaskCase& mc : cases) {
    const std::string label = fmt::format("{}{} tile {} K {} S {} {}{}", mc.granite ? "granite " : "",
                                          page_score_name(mc.score), mc.tile, mc.K, mc.S,
                                          mc.shared ? "shared" : "per group", mc.docs ? " doc-mask" : "");
    const std::filesystem::path& model = mc.granite ? *granite_ : *dir_;
    SCOPED_TRACE(label);
    const auto dir = temp_dir("_mask");
    const auto t = tokens(N + 1, 17 + uint64_t(mc.tile), mc.docs ? 3 : -1);
    const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
    ChunkPlan p{C, P, DType::F32, mc.docs ? 3 : -1};
    p.sparse = sparse(mc.K, mc.tile, mc.S, mc.shared, mc.score);
    auto cpu = make_cpu_backend();
    Model* mp = nullptr;
    const Step got = step(*cpu, model, ids, tg, p, &mp);
    std::unique_ptr<Model> m(mp);
    const ModelConfig& cfg = m->config();
    const int64_t L = cfg.layers, G = cfg.kv_heads;
    std::vector<uint8_t> mask(size_t(L * G * N * N), 0);
    const int64_t begins[] = {0, 32, 96};
    int64_t sparse_keys = 0;  // earlier keys masked away: the cases are sparse
    for (int64_t l = 0; l < L; ++l)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t i = 0; i < N; ++i) {
          const int64_t b = i >= 96 ? begins[2] : i >= 32 ? begins[1] : begins[0];
          std::vector<int64_t> chosen;
          if (b > 0) chosen = m->sparse()->recorded(l, b, (i - b) / mc.tile, mc.shared ? 0 : g);
          for (int64_t j = 0; j <= i; ++j) {
            const bool ok = j >= b || std::find(chosen.begin(), chosen.end(), j / P) != chosen.end();
            mask[size_t(((l * G + g) * N + i) * N + j)] = ok;
            sparse_keys += !ok;
          }
        }
    ASSERT_GT(sparse_keys, 0) << "nothing masked: not a sparse case";
    {
      std::ofstream f(dir / "mask.bin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(mask.data()), std::streamsize(mask.size()));
      std::ofstream tk(dir / "tokens.bin", std::ios::binary);
      for (int32_t v : t) tk.write(reinterpret_cast<const char*>(&v), 4);
      std::ofstream dk(dir / "docs.bin", std::ios::binary);
      int32_t doc = 0;
      for (int64_t i = 0; i < N; ++i) {  // a token after a separator starts a document
        dk.write(reinterpret_cast<const char*>(&doc), 4);
        if (ids[size_t(i)] == 3) ++doc;
      }
    }
    const std::string cmd = fmt::format(
        "{} {}/tests/oracle/torch_oracle.py --model {} --tokens {} --mask {} --out {}{} > {} 2>&1", torch_python(),
        source_dir().string(), model.string(), (dir / "tokens.bin").string(), (dir / "mask.bin").string(),
        (dir / "oracle.safetensors").string(),
        mc.docs ? fmt::format(" --doc-ids {} --ignore-targets-of 3", (dir / "docs.bin").string()) : "",
        (dir / "oracle.log").string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "oracle failed: " << read_text(dir / "oracle.log");
    if (&mc == &cases[0]) {  // a control: without the mask (dense attention) the engine's gradients are far off
      std::string dense_cmd = cmd;
      dense_cmd.replace(dense_cmd.find(" --mask "), 8 + (dir / "mask.bin").string().size(), "");
      dense_cmd.replace(dense_cmd.find("oracle.safetensors"), 18, "dense.safetensors");
      ASSERT_EQ(std::system(dense_cmd.c_str()), 0) << "oracle failed: " << read_text(dir / "oracle.log");
      const SafetensorsModel dense = SafetensorsModel::open(dir / "dense.safetensors");
      std::vector<float> want(got.grads.size());
      size_t at = 0;
      for (const ParamSpec& s : m->grads().specs()) {
        dense.read_f32("grad." + s.name, want.data() + at, s.shape);
        at += size_t(s.numel());
      }
      const double off = rel_error(got.grads, want);
      EXPECT_GT(off, 1e-3) << "sparse gradients match dense attention's: the mask comparison would be blind";
      std::cout << fmt::format("[ sparse   ] control: against unmasked dense attention the gradients differ by {:.2e}\n", off);
    }
    const SafetensorsModel ref = SafetensorsModel::open(dir / "oracle.safetensors");
    std::vector<float> ref_loss(1);
    ref.read_f32("loss", ref_loss.data());
    const double loss_err = std::abs(got.loss - ref_loss[0]) / std::abs(ref_loss[0]);
    EXPECT_LE(loss_err, 1e-5) << "loss";
    worst_loss = std::max(worst_loss, loss_err);
    size_t at = 0;
    double worst = 0;
    for (const ParamSpec& s : m->grads().specs()) {
      std::vector<float> want(static_cast<size_t>(s.numel()));
      ref.read_f32("grad." + s.name, want.data(), s.shape);
      const double err = rel_error(got.grads.data() + at, want.data(), want.size());
      EXPECT_LE(err, 1e-5) << s.name;
      worst = std::max(worst, err);
      at += want.size();
    }
    worst_grad = std::max(worst_grad, worst);
    std::cout << fmt::format("[ sparse   ] {:<40} {} earlier keys masked; loss rel. error {:.1e}, worst gradient {:.2e}\n",
                             label, sparse_keys, loss_err, worst);
  }
  std::cout << fmt::format("[ sparse   ] against the masked float64 reference: worst loss {:.1e}, worst gradient {:.2e}\n",
                           worst_loss, worst_grad);
}

// ---- memory ----

ModelConfig small_config() {
  nlohmann::json j = tiny_config_json("llama", 1);
  j["hidden_size"] = 8;
  j["num_attention_heads"] = 1;
  j["head_dim"] = 4;
  j["intermediate_size"] = 24;
  return parse_config(j, "sparse memory test config");
}

// --offload kv --sparse-pages on the simulated device: the plan equals every (tier, tag) peak, and
// the device grows only by the page metadata and the page scores: per page, layers x G x D x 2
// bytes of mean keys (twice that of min/max for quest) and tiles x G x 4 bytes of scores, beside
// a constant tiles x G x K x 4 bytes of top-K indices (formula written here).
TEST(SparseMemory, DeviceGrowsByTheMetadataAlone) {
  const ModelConfig cfg = small_config();
  for (PageScore score : {PageScore::Mean, PageScore::Quest}) {
    ChunkPlan plan{512, 64};
    plan.offload_kv = true;
    plan.sparse = sparse(4, 128, 1, false, score);
    const int64_t G = cfg.kv_heads, D = cfg.head_dim, L = cfg.layers, P = plan.page_size, K = 4;
    const int64_t meta_page = L * G * D * 2 * (score == PageScore::Quest ? 2 : 1);
    Accountant& acc = Accountant::global();
    int64_t prev_device = 0, prev_N = 0;
    for (int64_t N : {2048, 12288, 22528}) {
      SCOPED_TRACE(fmt::format("{} N={}", page_score_name(score), N));
      acc.reset_peaks();
      MemoryPlan pred;
      pred = oomb::testing::train_for_peaks(cfg, plan, N, true);
      expect_peaks_equal(pred);
      const int64_t device = acc.total(Tier::Device).peak, pages = (N + P - 1) / P, tiles = 512 / 128;
      EXPECT_EQ(acc.get(Tier::Device, Tag::PageMeta).peak, pages * meta_page + tiles * G * pages * 4 + tiles * G * K * 4);
      if (prev_N > 0) {
        const int64_t grown = device - prev_device, added = (N - prev_N) / P;
        EXPECT_EQ(grown, added * (meta_page + tiles * G * 4)) << "the device grew by more than the metadata";
        std::cout << fmt::format("[ sparse   ] {:<5} N {:>5} -> {:>5}: device {} -> {} B, +{} B per +10K tokens (measured)\n",
                                 page_score_name(score), prev_N, N, prev_device, device, grown * 10000 / (N - prev_N));
      }
      prev_device = device, prev_N = N;
    }
  }
}

// The Qwen2.5-7B shape, planned: with --offload kv --sparse-pages the device grows by the mean keys
// (28 layers x 4 kv heads x 128 x 2 bytes per 128-token page = 224 B a token) and the scores (32
// tiles of 128 at C = 4096 x 4 groups x 4 bytes per page = 4 B a token): 2.28 MB per 10K tokens.
// Quest's min and max keys take twice the means' bytes: 4.52 MB, above the 3 MB goal.
TEST(SparseMemory, PlannedGrowthForQwen7B) {
  const ModelConfig cfg = preset_config("qwen2.5-7b");
  for (PageScore score : {PageScore::Mean, PageScore::Quest}) {
    ChunkPlan plan{4096, 128};
    plan.offload_kv = true;
    plan.sparse = sparse(64, 128, 1, false, score);
    const int64_t N = 131072;
    const int64_t ws = int64_t(cuda_workspace_bytes(workspace_shape(cfg, plan.chunk)));
    const MemoryPlan a = plan_memory(cfg, plan, N, "adamw", size_t(ws), Tier::Device);
    const MemoryPlan b = plan_memory(cfg, plan, N + 10240, "adamw", size_t(ws), Tier::Device);
    const int64_t per_10240 = b.total(Tier::Device) - a.total(Tier::Device);
    const int64_t copies = score == PageScore::Quest ? 2 : 1;
    EXPECT_EQ(per_10240, 80 * (28 * 4 * 128 * 2 * copies + 32 * 4 * 4));
    std::cout << fmt::format("[ sparse   ] qwen2.5-7b, --offload kv --sparse-pages 64 --sparse-score {}: device +{} B per "
                             "+10240 tokens ({:.2f} MB per +10K; goal 3 MB, OOMB 10 MB)\n",
                             page_score_name(score), per_10240, double(per_10240) / 10240 * 1e4 / 1e6);
    if (score == PageScore::Mean) {
      EXPECT_LE(double(per_10240) / 10240 * 1e4, 3e6);
    }
  }
}

}  // namespace
