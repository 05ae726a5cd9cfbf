// The CPU backend's row-wise ops at real model widths, the fused loss at model width and over
// vocabulary tiles, and the sum of squares on any thread count: each against float64 written here
// (the same ops at small sizes, with finite differences: test_cpu_ops.cpp).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "cpu_ops_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

// ---- the row-wise ops at real model widths ----
// Widths above any kernel's block size (Qwen2-0.5B's 896, Qwen2-7B's 3584, Llama's 4096, 5120) and
// an odd one, several rows each, so every row loop runs more than once and ends on a partial step.
// References: float64, gradients written out analytically (finite differences over 5120-wide rows
// would cost too much; test_cpu_ops.cpp's small cases check the same formulas by differences).
constexpr int64_t kWidths[] = {896, 3584, 4096, 5120, 4099};

TEST_F(Fixture, RowWiseOpsAtModelWidths) {
  const int64_t T = 3;
  for (int64_t d : kWidths) {
    const std::string at = fmt::format(" d={}", d);
    // rmsnorm: y = x r w, r = (mean x^2 + eps)^-1/2;  dx = r (w dy) - x r^3 / d sum(w dy x);  dw = sum_t dy x r
    {
      const double eps = 1e-6;
      Vec x = randd(size_t(T * d), 71 + d), w = randd(size_t(d), 72), dy = randd(size_t(T * d), 73);
      for (auto& v : w) v += 1.0;
      Vec y(x.size()), dx(x.size()), dw(size_t(d), 0.0);
      auto xf = to_f(x), wf = to_f(w), dyf = to_f(dy);
      x = Vec(xf.begin(), xf.end()), w = Vec(wf.begin(), wf.end()), dy = Vec(dyf.begin(), dyf.end());
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0, dot = 0;
        for (int64_t i = 0; i < d; ++i) ss += x[size_t(t * d + i)] * x[size_t(t * d + i)];
        const double r = 1.0 / std::sqrt(ss / double(d) + eps);
        for (int64_t i = 0; i < d; ++i) dot += w[size_t(i)] * dy[size_t(t * d + i)] * x[size_t(t * d + i)];
        for (int64_t i = 0; i < d; ++i) {
          const size_t k = size_t(t * d + i);
          y[k] = x[k] * r * w[size_t(i)];
          dx[k] = r * w[size_t(i)] * dy[k] - x[k] * r * r * r / double(d) * dot;
          dw[size_t(i)] += dy[k] * x[k] * r;
        }
      }
      std::vector<float> yg(x.size()), rs(static_cast<size_t>(T)), dxg(x.size()), dwg(size_t(d), 0.0f);
      Tensor X = Tensor::f32(xf.data(), {T, d}), W = Tensor::f32(wf.data(), {d}), Y = Tensor::f32(yg.data(), {T, d});
      Tensor RS = Tensor::f32(rs.data(), {T}), DY = Tensor::f32(dyf.data(), {T, d});
      Tensor DX = Tensor::f32(dxg.data(), {T, d}), DW = Tensor::f32(dwg.data(), {d});
      be->rmsnorm_fwd(X, W, float(eps), Y, RS);
      be->rmsnorm_bwd(X, W, RS, DY, DX, false, DW);
      expect_close(yg, y, 2e-7, "rmsnorm y" + at);    // measured <= 5.9e-8 over the widths
      expect_close(dxg, dx, 2e-7, "rmsnorm dx" + at);  // measured <= 6.6e-8
      expect_close(dwg, dw, 2e-7, "rmsnorm dw" + at);  // measured <= 5.6e-8
    }
    // embedding: rows of width d copied; the backward adds repeated ids
    {
      const int64_t V = 7, Te = 11;
      std::vector<int32_t> ids(static_cast<size_t>(Te));
      for (int64_t t = 0; t < Te; ++t) ids[size_t(t)] = int32_t((t * 3 + 1) % V);  // repeats, id 0..6
      auto table = to_f(randd(size_t(V * d), 74)), dout = to_f(randd(size_t(Te * d), 75));
      Vec want_out(size_t(Te * d)), want_dt(size_t(V * d), 0.0);
      for (int64_t t = 0; t < Te; ++t)
        for (int64_t i = 0; i < d; ++i) {
          want_out[size_t(t * d + i)] = table[size_t(ids[size_t(t)] * d + i)];
          want_dt[size_t(ids[size_t(t)] * d + i)] += dout[size_t(t * d + i)];
        }
      std::vector<float> out(size_t(Te * d)), dt(size_t(V * d), 0.0f);
      Tensor I = Tensor::i32(ids.data(), {Te}), TB = Tensor::f32(table.data(), {V, d}), O = Tensor::f32(out.data(), {Te, d});
      Tensor DO = Tensor::f32(dout.data(), {Te, d}), DT = Tensor::f32(dt.data(), {V, d});
      be->embedding_fwd(I, TB, O);
      be->embedding_bwd(I, DO, DT);
      expect_close(out, want_out, 0.0, "embedding out" + at);       // a copy: exact
      expect_close(dt, want_dt, 0.0, "embedding dtable" + at);  // exact: two addends per row, one rounding
    }
    // swiglu over (T, d): o = g s(g) u;  dg = do u s (1 + g (1 - s));  du = do g s
    {
      auto g = to_f(randd(size_t(T * d), 76, 2.0)), u = to_f(randd(size_t(T * d), 77)),
           dout = to_f(randd(size_t(T * d), 78));
      Vec o(g.size()), dg(g.size()), du(g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        const double gi = g[i], sg = 1.0 / (1.0 + std::exp(-gi));
        o[i] = gi * sg * u[i];
        dg[i] = dout[i] * u[i] * sg * (1.0 + gi * (1.0 - sg));
        du[i] = dout[i] * gi * sg;
      }
      std::vector<float> og(g.size()), dgg(g.size()), dug(g.size());
      Tensor G = Tensor::f32(g.data(), {T, d}), U = Tensor::f32(u.data(), {T, d}), O = Tensor::f32(og.data(), {T, d});
      Tensor DO = Tensor::f32(dout.data(), {T, d}), DG = Tensor::f32(dgg.data(), {T, d}),
             DU = Tensor::f32(dug.data(), {T, d});
      be->glu_fwd(G, U, O);
      be->glu_bwd(G, U, DO, DG, DU);
      expect_close(og, o, 2e-7, "swiglu out" + at);      // measured <= 6.1e-8
      expect_close(dgg, dg, 2e-7, "swiglu dgate" + at);  // measured <= 6.9e-8
      expect_close(dug, du, 2e-7, "swiglu dup" + at);    // measured <= 6.0e-8
    }
  }
}

// RoPE with head counts x head dim that are not the hidden size (Qwen3: 16 x 128 over hidden 1024;
// 40 x 128 = 5120; 14 x 64 = 896) and an odd head count; the backward is the inverse rotation.
TEST_F(Fixture, RopeManyHeadsWideHeads) {
  for (auto [T, H, D] : std::vector<std::array<int64_t, 3>>{{5, 16, 128}, {3, 40, 128}, {4, 14, 64}, {2, 7, 256}}) {
    const std::string at = fmt::format(" H={} D={}", H, D);
    std::vector<float> inv(size_t(D / 2));
    for (size_t i = 0; i < inv.size(); ++i) inv[i] = float(std::pow(1e6, -2.0 * double(i) / double(D)));
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t * 4093 + 17);
    auto x = to_f(randd(size_t(T * H * D), 79)), g = to_f(randd(size_t(T * H * D), 80));
    Vec y(x.size()), dx(x.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double ang = double(float(pos[size_t(t)]) * inv[size_t(i)]);  // the fp32 angle, as HF
          const double c = std::cos(ang) * 1.5, s = std::sin(ang) * 1.5;
          const size_t a = size_t((t * H + h) * D + i), b = a + size_t(D / 2);
          y[a] = x[a] * c - x[b] * s, y[b] = x[b] * c + x[a] * s;
          dx[a] = g[a] * c + g[b] * s, dx[b] = g[b] * c - g[a] * s;
        }
    RopeTable rt{inv.data(), 1.5f};
    Tensor X = Tensor::f32(x.data(), {T, H, D}), P = Tensor::i32(pos.data(), {T}), G = Tensor::f32(g.data(), {T, H, D});
    be->rope_fwd(X, P, rt);
    be->rope_bwd(G, P, rt);
    expect_close(x, y, 1.5e-7, "rope y" + at);   // measured <= 5.2e-8
    expect_close(g, dx, 1.5e-7, "rope dx" + at);  // measured <= 5.2e-8
  }
}

// The loss written out in float64 over the rows with a target (tg < 0: none): the sum of
// logsumexp - the target's logit, the rows whose argmax (ties to the lower id) is the target, and
// both gradients, scale * (softmax - one-hot).
struct XentReference {
  double loss = 0;
  int64_t hits = 0;
  Vec dh, dw;
};
XentReference xent_reference(const std::vector<float>& h, const std::vector<float>& w, const std::vector<int32_t>& tg,
                             int64_t d, int64_t V, float scale) {
  XentReference r{0, 0, Vec(h.size(), 0.0), Vec(w.size(), 0.0)};
  for (int64_t t = 0; t < int64_t(tg.size()); ++t) {
    if (tg[size_t(t)] < 0) continue;
    Vec lg(size_t(V), 0.0);
    double m = -1e300, z = 0;
    int64_t arg = 0;
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t i = 0; i < d; ++i) lg[size_t(v)] += double(h[size_t(t * d + i)]) * w[size_t(v * d + i)];
      if (lg[size_t(v)] > m) m = lg[size_t(v)], arg = v;
    }
    for (double l : lg) z += std::exp(l - m);
    r.loss += m + std::log(z) - lg[size_t(tg[size_t(t)])];
    r.hits += arg == tg[size_t(t)];
    for (int64_t v = 0; v < V; ++v) {
      const double p = std::exp(lg[size_t(v)] - m) / z - (v == tg[size_t(t)]);
      for (int64_t i = 0; i < d; ++i) {
        r.dh[size_t(t * d + i)] += scale * p * w[size_t(v * d + i)];
        r.dw[size_t(v * d + i)] += scale * p * h[size_t(t * d + i)];
      }
    }
  }
  return r;
}

// The fused loss at a real hidden width and an odd vocabulary, over two token tiles (256) and a
// partial third: loss and both gradients against float64 written out (softmax - one-hot).
TEST_F(Fixture, FusedLossAtModelWidth) {
  const int64_t T = 520, d = 896, V = 151;
  auto h = to_f(randd(size_t(T * d), 81, 0.05)), w = to_f(randd(size_t(V * d), 82, 0.05));
  std::vector<int32_t> tg(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) tg[size_t(t)] = t % 11 == 5 ? -1 : int32_t((t * 37) % V);
  const float scale = 0.25f;
  const auto [loss, hits, dh, dw] = xent_reference(h, w, tg, d, V, scale);
  std::vector<float> dhg(h.size()), dwg(w.size(), 0.0f);
  Tensor H = Tensor::f32(h.data(), {T, d}), W = Tensor::f32(w.data(), {V, d}), TG = Tensor::i32(tg.data(), {T});
  Tensor DH = Tensor::f32(dhg.data(), {T, d}), DW = Tensor::f32(dwg.data(), {V, d});
  const double got = be->lm_head_xent(H, W, TG, scale, &DH, &DW, nullptr);
  const double le = std::abs(got - loss) / loss;
  EXPECT_LE(le, 5e-10);  // measured 1.6e-10
  std::cout << fmt::format("[ error    ] {:<32} {:.2e} (bound {:.1e})\n", "xent loss d=896", le, 5e-10);
  expect_close(dhg, dh, 6e-7, "xent dh d=896");  // measured 2.2e-7
  expect_close(dwg, dw, 8e-7, "xent dw d=896");  // measured 2.7e-7
}

}  // namespace

// ---- the loss over vocabulary tiles ----
// A vocabulary of three tiles (lm_head_vocab_tile: 6720, 6720, 6560 rows): the loss, hits and both
// gradients against float64 written here; the tiles passed one by one from buffers of their own
// (the offloaded lm_head's way) give lm_head_xent's bits, and a tile given the wrong v0 does not.
TEST_F(Fixture, FusedLossOverVocabularyTiles) {
  const int64_t T = 300, d = 16, V = 20000, Vt = lm_head_vocab_tile(V), K = (V + Vt - 1) / Vt;
  ASSERT_EQ(K, 3);
  auto h = to_f(randd(size_t(T * d), 91, 0.5)), w = to_f(randd(size_t(V * d), 92, 0.5));
  std::vector<int32_t> tg(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) tg[size_t(t)] = t % 17 == 3 ? -1 : int32_t((t * 7919) % V);
  auto logit = [&](int64_t t, int64_t v) {
    double l = 0;
    for (int64_t i = 0; i < d; ++i) l += double(h[size_t(t * d + i)]) * w[size_t(v * d + i)];
    return l;
  };
  for (int64_t t = 0; t < T; t += 4) {  // every 4th row's target its argmax, in whichever tile it is
    int64_t arg = 0;
    for (int64_t v = 1; v < V; ++v)
      if (logit(t, v) > logit(t, arg)) arg = v;
    tg[size_t(t)] = int32_t(arg);
  }
  const float scale = 0.25f;
  const auto [loss, hits, dh, dw] = xent_reference(h, w, tg, d, V, scale);
  std::vector<float> dhg(h.size()), dwg(w.size(), 0.0f);
  Tensor H = Tensor::f32(h.data(), {T, d}), W = Tensor::f32(w.data(), {V, d}), TG = Tensor::i32(tg.data(), {T});
  Tensor DH = Tensor::f32(dhg.data(), {T, d}), DW = Tensor::f32(dwg.data(), {V, d});
  int64_t got_hits = -1;
  const double got = be->lm_head_xent(H, W, TG, scale, &DH, &DW, &got_hits);
  const double le = std::abs(got - loss) / loss;
  EXPECT_LE(le, 2e-9);
  EXPECT_EQ(got_hits, hits);
  EXPECT_GE(hits, T / 4);
  std::cout << fmt::format("[ error    ] {:<32} {:.2e} (bound {:.1e}), hits {}\n", "xent loss, 3 vocab tiles", le,
                           2e-9, got_hits);
  expect_close(dhg, dh, 1e-6, "xent dh, 3 vocab tiles");
  expect_close(dwg, dw, 1e-6, "xent dw, 3 vocab tiles");

  // the tiles one by one from their own buffers, with the ops the model calls
  auto tiled = [&](int64_t v0_shift, std::vector<float>& dh_out, std::vector<float>& dw_out) {
    std::vector<double> st(size_t(T) * 4), sums(2, 0.0);
    Tensor ST(st.data(), DType::F64, {T, 4}, Tier::Host), SUMS(sums.data(), DType::F64, {2}, Tier::Host);
    std::vector<std::vector<float>> wt(static_cast<size_t>(K)), gt(static_cast<size_t>(K));
    for (int64_t j = 0; j < K; ++j) {
      const int64_t n = std::min(Vt, V - j * Vt);
      wt[size_t(j)].assign(w.begin() + j * Vt * d, w.begin() + (j * Vt + n) * d);
      gt[size_t(j)].assign(size_t(n * d), 0.0f);
    }
    auto v0_of = [&](int64_t j) { return j == 1 ? j * Vt + v0_shift : j * Vt; };
    for (int64_t j = 0; j < K; ++j)
      be->lm_head_xent_stats(H, Tensor::f32(wt[size_t(j)].data(), {int64_t(wt[size_t(j)].size()) / d, d}), v0_of(j),
                             TG, ST);
    be->lm_head_xent_loss(ST, TG, SUMS);
    dh_out.assign(h.size(), 0.0f);
    Tensor D = Tensor::f32(dh_out.data(), {T, d});
    for (int64_t j = K - 1; j >= 0; --j) {
      const int64_t n = int64_t(wt[size_t(j)].size()) / d;
      Tensor G = Tensor::f32(gt[size_t(j)].data(), {n, d});
      be->lm_head_xent_grad(H, Tensor::f32(wt[size_t(j)].data(), {n, d}), v0_of(j), TG, ST, scale, &D, j != K - 1, &G);
    }
    dw_out.clear();
    for (auto& g : gt) dw_out.insert(dw_out.end(), g.begin(), g.end());
    return sums[0];
  };
  std::vector<float> dh_t, dw_t;
  const double l_t = tiled(0, dh_t, dw_t);
  EXPECT_EQ(std::memcmp(&l_t, &got, sizeof got), 0) << l_t << " vs " << got;
  EXPECT_EQ(std::memcmp(dh_t.data(), dhg.data(), dhg.size() * 4), 0) << "dh";
  EXPECT_EQ(std::memcmp(dw_t.data(), dwg.data(), dwg.size() * 4), 0) << "dw";
  std::vector<float> dh_bad, dw_bad;
  const double l_bad = tiled(1, dh_bad, dw_bad);  // control: the second tile one row off
  EXPECT_NE(std::memcmp(&l_bad, &got, sizeof got), 0) << "a tile's v0 one row off still gives the loss's bits";
  EXPECT_NE(std::memcmp(dh_bad.data(), dhg.data(), dhg.size() * 4), 0) << "a tile's v0 one row off: dh";
}

// The argmax over tiles: equal logits (exact small integers) at ids 100 (tile 0) and 7000 (tile 1)
// go to the lower id, so a target 100 hits and a target 7000 does not; a target elsewhere does not.
TEST_F(Fixture, FusedLossArgmaxTiesAcrossTilesGoToTheLowerId) {
  const int64_t d = 16, V = 20000;
  ASSERT_LT(lm_head_vocab_tile(V), 7000);
  ASSERT_GT(lm_head_vocab_tile(V), 100);
  std::vector<float> w(size_t(V * d), 0.0f), h(size_t(3 * d), 0.0f);
  w[size_t(100 * d)] = w[size_t(7000 * d)] = 2.0f;
  for (int t = 0; t < 3; ++t) h[size_t(t * d)] = 1.0f;
  for (const auto& [targets, want] : std::vector<std::pair<std::vector<int32_t>, int64_t>>{
           {{100, 7000, 5}, 1}, {{7000, 7000, 100}, 1}, {{7000, 5, 6}, 0}, {{100, 100, 100}, 3}}) {
    std::vector<int32_t> tg = targets;
    int64_t hits = -1;
    be->lm_head_xent(Tensor::f32(h.data(), {3, d}), Tensor::f32(w.data(), {V, d}), Tensor::i32(tg.data(), {3}), 1.0f,
                     nullptr, nullptr, &hits);
    EXPECT_EQ(hits, want) << fmt::format("targets {}", fmt::join(targets, ","));
  }
}

// The gradient norm's sum of squares (Backend::sum_squares on the CPU and the simulated device: the
// clip's input): the order it states (64K chunks, each in 8 lanes of i mod 8, lanes then chunks in
// order), written out here element by element, gives its bits on one thread and on all; and it is
// within 1e-12 of the sum in long double (each lane adds 8K of the terms: ~1e-14 expected).
TEST(CpuOps, SumOfSquaresInItsStatedOrderOnAnyThreadCount) {
  const int64_t n = 3 * (int64_t(1) << 16) + 1237;  // chunks, and a tail that is no multiple of 8
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t s = 7;
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = float(int64_t(s >> 40) - (int64_t(1) << 23)) * 1e-5f;
  }
  double want = 0;
  long double exact = 0;
  for (int64_t c = 0; c < n; c += int64_t(1) << 16) {
    double lane[8] = {};
    for (int64_t i = c; i < std::min(n, c + (int64_t(1) << 16)); ++i) lane[(i - c) % 8] += double(x[i]) * double(x[i]);
    double chunk = 0;
    for (const double l : lane) chunk += l;
    want += chunk;
  }
  for (const float v : x) exact += (long double)v * v;
  auto cpu = make_cpu_backend();
  const Tensor t(x.data(), DType::F32, {n}, Tier::Host);
  const int threads = omp_get_max_threads();
  for (const int k : {1, threads}) {
    omp_set_num_threads(k);
    const double got = cpu->sum_squares(t);
    omp_set_num_threads(threads);
    EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want)) << k << " threads: " << got << " " << want;
    EXPECT_NEAR(got, double(exact), 1e-12 * double(exact));
  }
}
