// Per-op checks of the CPU backend: forward against an independent float64 reference written here,
// backward against central finite differences of that reference (loss = sum(out * R), R random).
// The same ops at model widths and the loss over vocabulary tiles: test_cpu_ops_wide.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>

#include "backend/backend.h"
#include "cpu_ops_fixture.h"
#include "dtype_reference.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

double dotv(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- linear ----
Vec ref_linear(const Vec& x, const Vec& w, const Vec* b, int64_t T, int64_t in, int64_t out) {
  Vec y(size_t(T * out));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? (*b)[size_t(o)] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[size_t(t * in + i)] * w[size_t(o * in + i)];
      y[size_t(t * out + o)] = s;
    }
  return y;
}

TEST_F(Fixture, LinearForwardBackward) {
  const int64_t T = 7, in = 5, out = 3;
  Vec x = randd(T * in, 1), w = randd(out * in, 2), b = randd(out, 3), R = randd(T * out, 4);
  auto xf = to_f(x), wf = to_f(w), bf = to_f(b), Rf = to_f(R);
  std::vector<float> y(T * out), dx(T * in), dw(out * in, 0.0f), db(out, 0.0f);
  Tensor X = Tensor::f32(xf.data(), {T, in}), W = Tensor::f32(wf.data(), {out, in}), B = Tensor::f32(bf.data(), {out});
  Tensor Y = Tensor::f32(y.data(), {T, out}), DY = Tensor::f32(Rf.data(), {T, out});
  Tensor DX = Tensor::f32(dx.data(), {T, in}), DW = Tensor::f32(dw.data(), {out, in}), DB = Tensor::f32(db.data(), {out});
  be->linear_fwd(X, W, &B, Y);
  expect_close(y, ref_linear(x, w, &b, T, in, out), 2e-7, "y");  // measured 6.6e-8
  be->linear_bwd(X, W, DY, &DX, false, &DW, &DB);
  expect_close(dx, numgrad([&](const Vec& v) { return dotv(ref_linear(v, w, &b, T, in, out), R); }, x), 1e-7, "dx");  // measured 3.3e-8
  expect_close(dw, numgrad([&](const Vec& v) { return dotv(ref_linear(x, v, &b, T, in, out), R); }, w), 2e-7, "dw");  // 5.9e-8
  expect_close(db, numgrad([&](const Vec& v) { return dotv(ref_linear(x, w, &v, T, in, out), R); }, b), 1e-7, "db");  // 0 (exact)
  // accumulation: a second backward adds to dw and (when asked) dx
  be->linear_bwd(X, W, DY, &DX, true, &DW, nullptr);
  Vec dw2 = numgrad([&](const Vec& v) { return 2 * dotv(ref_linear(x, v, &b, T, in, out), R); }, w);
  expect_close(dw, dw2, 2e-7, "dw accumulated");  // measured 5.9e-8
}

TEST_F(Fixture, LinearRejectsMismatchedShapes) {
  std::vector<float> a(12), b(12), c(12);
  Tensor X = Tensor::f32(a.data(), {3, 4}), W = Tensor::f32(b.data(), {4, 3}), Y = Tensor::f32(c.data(), {3, 4});
  try {
    be->linear_fwd(X, W, nullptr, Y);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_fwd:"), std::string::npos) << e.what();
  }
}

// ---- bf16 matmul operands (--precision bf16) ----
// A bf16 operand and the f32 tensor of the same values (each rounded once, to nearest even).
struct Rounded {
  std::vector<uint16_t> h;
  std::vector<float> f, raw;  // the rounded values, and the values before rounding
  explicit Rounded(std::vector<float> v) : raw(std::move(v)) {
    for (float x : raw) h.push_back(f32_to_bf16(x)), f.push_back(bf16_to_f32(h.back()));
  }
  Tensor bf16(std::initializer_list<int64_t> dims) { return Tensor(h.data(), DType::BF16, dims); }
  Tensor f32(std::initializer_list<int64_t> dims) { return Tensor::f32(f.data(), dims); }
};
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The CPU widens bf16 operands exactly and runs the same sgemm: a bf16-tensor linear gives the
// bits of the f32 linear on the rounded values (the reference the CUDA bf16 GEMMs are checked
// against). The unrounded f32 linear must differ, or nothing was rounded.
TEST_F(Fixture, Bf16LinearIsTheF32LinearOnRoundedValues) {
  // the last shape widens on every thread (T * in >= 32K elements)
  for (auto [T, in, out] :
       std::vector<std::array<int64_t, 3>>{{1, 5, 3}, {7, 33, 65}, {67, 128, 96}, {300, 256, 200}}) {
    SCOPED_TRACE(fmt::format("T={} in={} out={}", T, in, out));
    Rounded x(randn(size_t(T * in), 1)), w(randn(size_t(out * in), 2, 0.1f)), dy(randn(size_t(T * out), 3));
    std::vector<float> bias = randn(size_t(out), 4);
    Tensor B = Tensor::f32(bias.data(), {out});
    std::vector<float> y16(size_t(T * out)), y32(y16.size()), yraw(y16.size());
    Tensor Y16 = Tensor::f32(y16.data(), {T, out}), Y32 = Tensor::f32(y32.data(), {T, out});
    be->linear_fwd(x.bf16({T, in}), w.bf16({out, in}), &B, Y16);
    be->linear_fwd(x.f32({T, in}), w.f32({out, in}), &B, Y32);
    EXPECT_TRUE(same_bits(y16, y32)) << "y: rel. error " << rel_error(y16, y32);
    Tensor YR = Tensor::f32(yraw.data(), {T, out});
    be->linear_fwd(Tensor::f32(x.raw.data(), {T, in}), Tensor::f32(w.raw.data(), {out, in}), &B, YR);
    EXPECT_FALSE(same_bits(y16, yraw)) << "the unrounded inputs give the same bits: nothing was rounded";
    for (bool acc : {false, true}) {  // dx overwritten or accumulated; dw and db accumulate
      std::vector<float> dx16 = randn(size_t(T * in), 5), dw16 = randn(size_t(out * in), 6),
                         db16 = randn(size_t(out), 7);
      std::vector<float> dx32 = dx16, dw32 = dw16, db32 = db16;
      Tensor DX16 = Tensor::f32(dx16.data(), {T, in}), DW16 = Tensor::f32(dw16.data(), {out, in}),
             DB16 = Tensor::f32(db16.data(), {out});
      Tensor DX32 = Tensor::f32(dx32.data(), {T, in}), DW32 = Tensor::f32(dw32.data(), {out, in}),
             DB32 = Tensor::f32(db32.data(), {out});
      be->linear_bwd(x.bf16({T, in}), w.bf16({out, in}), dy.bf16({T, out}), &DX16, acc, &DW16, &DB16);
      be->linear_bwd(x.f32({T, in}), w.f32({out, in}), dy.f32({T, out}), &DX32, acc, &DW32, &DB32);
      EXPECT_TRUE(same_bits(dx16, dx32)) << "dx: rel. error " << rel_error(dx16, dx32);
      EXPECT_TRUE(same_bits(dw16, dw32)) << "dw: rel. error " << rel_error(dw16, dw32);
      EXPECT_TRUE(same_bits(db16, db32)) << "db: rel. error " << rel_error(db16, db32);
    }
  }
  // one dtype per GEMM, named
  std::vector<float> a(12, 1.0f), c(12);
  std::vector<uint16_t> h(12, 0x3f80);
  Tensor X16(h.data(), DType::BF16, {3, 4}), W32 = Tensor::f32(a.data(), {3, 4}), Y = Tensor::f32(c.data(), {3, 3});
  EXPECT_NE(error_of([&] { be->linear_fwd(X16, W32, nullptr, Y); }).find("linear_fwd: w (f32) and x (bf16) must share"),
            std::string::npos);
  EXPECT_NE(error_of([&] { be->linear_bwd(W32, W32, Tensor(h.data(), DType::BF16, {3, 3}), nullptr, false, nullptr,
                                          nullptr); }).find("linear_bwd: dy (bf16) and x (f32) must share"),
            std::string::npos);
  Tensor Y16(h.data(), DType::BF16, {3, 3});
  EXPECT_NE(error_of([&] { be->linear_fwd(X16, X16, nullptr, Y16); }).find("linear_fwd: y must be f32, got bf16"),
            std::string::npos);
}

// The fused loss with bf16 h and w: the logits and the loss are the f32 path's on the rounded
// values, bit for bit; dh and dw come from the logits' gradient rounded to bf16, checked against
// float64 written here with that rounding (and the bound is below what skipping it gives).
TEST_F(Fixture, Bf16FusedLossRoundsTheLogitsGradient) {
  const int64_t T = 300, d = 64, V = 97;  // two tiles: 256 + 44 rows
  Rounded h(randn(size_t(T * d), 11, 0.5f)), w(randn(size_t(V * d), 12, 0.5f));
  std::vector<int32_t> tg(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) tg[size_t(t)] = t % 13 == 4 ? -1 : int32_t((t * 29) % V);
  Tensor TG = Tensor::i32(tg.data(), {T});
  const float scale = 0.125f;
  std::vector<float> dh16(size_t(T * d)), dw16(size_t(V * d), 0.0f), dh32 = dh16, dw32 = dw16;
  Tensor DH16 = Tensor::f32(dh16.data(), {T, d}), DW16 = Tensor::f32(dw16.data(), {V, d});
  Tensor DH32 = Tensor::f32(dh32.data(), {T, d}), DW32 = Tensor::f32(dw32.data(), {V, d});
  int64_t hits16 = 0, hits32 = 0;
  const double l16 = be->lm_head_xent(h.bf16({T, d}), w.bf16({V, d}), TG, scale, &DH16, &DW16, &hits16);
  const double l32 = be->lm_head_xent(h.f32({T, d}), w.f32({V, d}), TG, scale, &DH32, &DW32, &hits32);
  EXPECT_EQ(std::memcmp(&l16, &l32, sizeof l16), 0) << l16 << " vs " << l32;
  EXPECT_EQ(hits16, hits32);
  // float64 on the rounded values; the gradient (softmax - onehot) * scale rounded to bf16
  Vec dh(dh16.size(), 0.0), dw(dw16.size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    if (tg[size_t(t)] < 0) continue;
    Vec lg(size_t(V), 0.0);
    double m = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t i = 0; i < d; ++i) lg[size_t(v)] += double(h.f[size_t(t * d + i)]) * w.f[size_t(v * d + i)];
      m = std::max(m, lg[size_t(v)]);
    }
    for (double l : lg) z += std::exp(l - m);
    for (int64_t v = 0; v < V; ++v) {
      const float p = float(std::exp(lg[size_t(v)] - m) / z) * scale - (v == tg[size_t(t)] ? scale : 0.0f);
      const double p16 = bf16_to_f32(f32_to_bf16(p));
      for (int64_t i = 0; i < d; ++i) {
        dh[size_t(t * d + i)] += p16 * w.f[size_t(v * d + i)];
        dw[size_t(v * d + i)] += p16 * h.f[size_t(t * d + i)];
      }
    }
  }
  expect_close(dh16, dh, 6e-7, "bf16 xent dh");  // measured 1.4e-7
  expect_close(dw16, dw, 8e-7, "bf16 xent dw");  // measured 2.0e-7
  const double skipped = std::max(rel_error(dh32, to_f(dh)), rel_error(dw32, to_f(dw)));
  std::cout << fmt::format("[ error    ] {:<32} {:.2e}\n", "without the rounding", skipped);
  EXPECT_GT(skipped, 1e-4) << "the rounding changes too little for this test to see it";  // measured 1.1e-3
}

// ---- embedding ----
TEST_F(Fixture, EmbeddingForwardBackward) {
  const int64_t V = 6, d = 4, T = 9;
  std::vector<int32_t> ids = {0, 5, 2, 2, 3, 5, 5, 1, 0};
  Vec table = randd(V * d, 5), R = randd(T * d, 6);
  auto ref = [&](const Vec& tb) {
    Vec o(size_t(T * d));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < d; ++c) o[size_t(t * d + c)] = tb[size_t(ids[size_t(t)] * d + c)];
    return o;
  };
  auto tf = to_f(table), Rf = to_f(R);
  std::vector<float> out(T * d), dt(V * d, 0.0f);
  Tensor I = Tensor::i32(ids.data(), {T}), TB = Tensor::f32(tf.data(), {V, d}), O = Tensor::f32(out.data(), {T, d});
  Tensor DO = Tensor::f32(Rf.data(), {T, d}), DT = Tensor::f32(dt.data(), {V, d});
  be->embedding_fwd(I, TB, O);
  expect_close(out, ref(table), 0, "out");
  be->embedding_bwd(I, DO, DT);
  expect_close(dt, numgrad([&](const Vec& v) { return dotv(ref(v), R); }, table), 1e-7, "dtable");  // measured 3.1e-8
  // skip (transformers' padding_idx): that row takes nothing, the others what they took before
  const int64_t skip = ids[1];
  std::vector<float> ds(V * d, 0.0f);
  Tensor DS = Tensor::f32(ds.data(), {V, d});
  be->embedding_bwd(I, DO, DS, skip);
  int64_t skipped = 0;
  for (int64_t t = 0; t < T; ++t) skipped += ids[size_t(t)] == skip;
  ASSERT_GT(skipped, 0);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t c = 0; c < d; ++c)
      EXPECT_EQ(ds[size_t(v * d + c)], v == skip ? 0.0f : dt[size_t(v * d + c)]) << v << "," << c;
  EXPECT_THROW(be->embedding_bwd(I, DO, DS, V), Error);
  ids[3] = 6;
  EXPECT_THROW(be->embedding_fwd(I, TB, O), Error);
}

// ---- rmsnorm ----
// y = x r (w + off) over rows of d, r = (mean x^2 + eps)^-1/2, in float64
Vec rmsnorm_ref(const Vec& x, const Vec& w, int64_t d, double eps, double off) {
  Vec y(x.size());
  for (size_t t = 0; t < x.size() / size_t(d); ++t) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += x[t * size_t(d) + size_t(i)] * x[t * size_t(d) + size_t(i)];
    const double r = 1.0 / std::sqrt(ss / double(d) + eps);
    for (int64_t i = 0; i < d; ++i) y[t * size_t(d) + size_t(i)] = x[t * size_t(d) + size_t(i)] * r * (w[size_t(i)] + off);
  }
  return y;
}

TEST_F(Fixture, RmsNormForwardBackward) {
  const int64_t T = 5, d = 8;
  const double eps = 1e-5;
  Vec x = randd(T * d, 7), w = randd(d, 8), R = randd(T * d, 9);
  auto ref = [&](const Vec& xv, const Vec& wv) { return rmsnorm_ref(xv, wv, d, eps, 0.0); };
  auto xf = to_f(x), wf = to_f(w), Rf = to_f(R);
  std::vector<float> y(T * d), rstd(T), dx(T * d), dw(d, 0.0f);
  Tensor X = Tensor::f32(xf.data(), {T, d}), W = Tensor::f32(wf.data(), {d}), Y = Tensor::f32(y.data(), {T, d});
  Tensor RS = Tensor::f32(rstd.data(), {T}), DY = Tensor::f32(Rf.data(), {T, d});
  Tensor DX = Tensor::f32(dx.data(), {T, d}), DW = Tensor::f32(dw.data(), {d});
  be->rmsnorm_fwd(X, W, float(eps), Y, RS);
  expect_close(y, ref(x, w), 2e-7, "y");  // measured 6.6e-8
  be->rmsnorm_bwd(X, W, RS, DY, DX, false, DW);
  expect_close(dx, numgrad([&](const Vec& v) { return dotv(ref(v, w), R); }, x), 1.5e-7, "dx");  // measured 4.5e-8
  expect_close(dw, numgrad([&](const Vec& v) { return dotv(ref(x, v), R); }, w), 5e-8, "dw");  // measured 1.2e-8
}

// Gemma 3's norm (w_offset 1): y = x r (1 + w) against float64, its gradients numerically (dw as for w
// itself); and bit for bit the offset-free op with w + 1 as its weight (the same f32 sum, once).
TEST_F(Fixture, RmsNormWithWeightOffset) {
  const int64_t T = 5, d = 8;
  const double eps = 1e-6;
  Vec x = randd(T * d, 17), w = randd(d, 18, 0.1), R = randd(T * d, 19);
  auto ref = [&](const Vec& xv, const Vec& wv) { return rmsnorm_ref(xv, wv, d, eps, 1.0); };
  auto xf = to_f(x), wf = to_f(w), Rf = to_f(R);
  std::vector<float> w1(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) w1[i] = wf[i] + 1.0f;
  std::vector<float> y(T * d), y1(T * d), rstd(T), dx(T * d), dx1(T * d), dw(d, 0.0f), dw1(d, 0.0f);
  Tensor X = Tensor::f32(xf.data(), {T, d}), W = Tensor::f32(wf.data(), {d}), W1 = Tensor::f32(w1.data(), {d});
  Tensor Y = Tensor::f32(y.data(), {T, d}), Y1 = Tensor::f32(y1.data(), {T, d});
  Tensor RS = Tensor::f32(rstd.data(), {T}), DY = Tensor::f32(Rf.data(), {T, d});
  Tensor DX = Tensor::f32(dx.data(), {T, d}), DX1 = Tensor::f32(dx1.data(), {T, d});
  Tensor DW = Tensor::f32(dw.data(), {d}), DW1 = Tensor::f32(dw1.data(), {d});
  be->rmsnorm_fwd(X, W, float(eps), Y, RS, 1.0f);
  expect_close(y, ref(x, w), 2e-7, "y");
  be->rmsnorm_bwd(X, W, RS, DY, DX, false, DW, 1.0f);
  expect_close(dx, numgrad([&](const Vec& v) { return dotv(ref(v, w), R); }, x), 1.5e-7, "dx");
  expect_close(dw, numgrad([&](const Vec& v) { return dotv(ref(x, v), R); }, w), 5e-8, "dw");
  be->rmsnorm_fwd(X, W1, float(eps), Y1, RS);
  be->rmsnorm_bwd(X, W1, RS, DY, DX1, false, DW1);
  EXPECT_EQ(y1, y);
  EXPECT_EQ(dx1, dx);
  EXPECT_EQ(dw1, dw);
}

// ---- rope ----
// the whole head (R = D), and Phi-3's partial rotation: the first R dims turn, the others pass through;
// each with frequency i on dims (i, i + R/2), and on (2i, 2i + 1) (GLM's interleaved pairs)
TEST_F(Fixture, RopeForwardBackward) {
  const int64_t T = 6, H = 3, D = 8;
  std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.001f};
  std::vector<int32_t> pos = {0, 1, 2, 7, 3, 100};
  const float scaling = 1.2f;
  Vec x = randd(T * H * D, 10), R = randd(T * H * D, 11);
  for (const bool inter : {false, true})
  for (const int64_t Rd : {D, int64_t(6), int64_t(2)}) {
    SCOPED_TRACE("rotary dims " + std::to_string(Rd) + (inter ? " interleaved" : ""));
    auto ref = [&](const Vec& xv) {
      Vec y = xv;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < Rd / 2; ++i) {
            const double ang = double(float(pos[size_t(t)]) * inv[size_t(i)]);
            const double c = std::cos(ang) * scaling, s = std::sin(ang) * scaling;
            const size_t b = size_t((t * H + h) * D), i1 = b + size_t(inter ? 2 * i : i),
                         i2 = b + size_t(inter ? 2 * i + 1 : i + Rd / 2);
            y[i1] = xv[i1] * c - xv[i2] * s;
            y[i2] = xv[i2] * c + xv[i1] * s;
          }
      return y;
    };
    auto xf = to_f(x), g = to_f(R);
    Tensor X = Tensor::f32(xf.data(), {T, H, D}), P = Tensor::i32(pos.data(), {T});
    Tensor G = Tensor::f32(g.data(), {T, H, D});
    const RopeTable rt{inv.data(), scaling, Rd == D ? 0 : Rd, 0, inter};  // 0: the whole head
    be->rope_fwd(X, P, rt);
    expect_close(xf, ref(x), 1.5e-7, "y");  // measured 4.6e-8
    be->rope_bwd(G, P, rt);
    expect_close(g, numgrad([&](const Vec& v) { return dotv(ref(v), R); }, x), 1.5e-7, "dx");  // measured 4.6e-8
  }
  std::vector<float> xs(size_t(T * H * D));
  Tensor X = Tensor::f32(xs.data(), {T, H, D}), P = Tensor::i32(pos.data(), {T});
  for (const int64_t bad : {int64_t(3), int64_t(10)}) {
    try {
      be->rope_fwd(X, P, RopeTable{inv.data(), 1.0f, bad});
      ADD_FAILURE() << "rotary dims " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("rope_fwd: rotary dims " + std::to_string(bad)));
    }
  }
}

// ---- swiglu ----
TEST_F(Fixture, SwiGluForwardBackward) {
  const int64_t n = 20;
  Vec gt = randd(n, 12, 2.0), up = randd(n, 13), R = randd(n, 14);
  auto ref = [&](const Vec& g, const Vec& u) {
    Vec o(static_cast<size_t>(n), 0.0);
    for (size_t i = 0; i < size_t(n); ++i) o[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    return o;
  };
  auto gf = to_f(gt), uf = to_f(up), Rf = to_f(R);
  std::vector<float> o(n), dg(n), du(n);
  Tensor Gt = Tensor::f32(gf.data(), {n}), U = Tensor::f32(uf.data(), {n}), O = Tensor::f32(o.data(), {n});
  Tensor DO = Tensor::f32(Rf.data(), {n}), DG = Tensor::f32(dg.data(), {n}), DU = Tensor::f32(du.data(), {n});
  be->glu_fwd(Gt, U, O);
  expect_close(o, ref(gt, up), 1e-7, "out");  // measured 3.4e-8
  be->glu_bwd(Gt, U, DO, DG, DU);
  expect_close(dg, numgrad([&](const Vec& v) { return dotv(ref(v, up), R); }, gt), 2e-7, "dgate");  // measured 6.8e-8
  expect_close(du, numgrad([&](const Vec& v) { return dotv(ref(gt, v), R); }, up), 2.5e-7, "dup");  // measured 8.2e-8
}

// GeGLU (Gemma 3's gelu_pytorch_tanh): out = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) u against
// float64, its gradients numerically.
TEST_F(Fixture, GeGluForwardBackward) {
  const int64_t n = 24;
  Vec gt = randd(n, 32, 3.0), up = randd(n, 33), R = randd(n, 34);
  auto ref = [&](const Vec& g, const Vec& u) {
    Vec o(static_cast<size_t>(n), 0.0);
    for (size_t i = 0; i < size_t(n); ++i)
      o[i] = 0.5 * g[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (g[i] + 0.044715 * g[i] * g[i] * g[i]))) * u[i];
    return o;
  };
  auto gf = to_f(gt), uf = to_f(up), Rf = to_f(R);
  std::vector<float> o(n), dg(n), du(n);
  Tensor Gt = Tensor::f32(gf.data(), {n}), U = Tensor::f32(uf.data(), {n}), O = Tensor::f32(o.data(), {n});
  Tensor DO = Tensor::f32(Rf.data(), {n}), DG = Tensor::f32(dg.data(), {n}), DU = Tensor::f32(du.data(), {n});
  be->glu_fwd(Gt, U, O, Act::GeluTanh);
  expect_close(o, ref(gt, up), 2e-7, "out");
  be->glu_bwd(Gt, U, DO, DG, DU, Act::GeluTanh);
  expect_close(dg, numgrad([&](const Vec& v) { return dotv(ref(v, up), R); }, gt), 3e-7, "dgate");
  expect_close(du, numgrad([&](const Vec& v) { return dotv(ref(gt, v), R); }, up), 3e-7, "dup");
  std::vector<float> silu(n);  // (not SwiGLU's values)
  Tensor S = Tensor::f32(silu.data(), {n});
  be->glu_fwd(Gt, U, S);
  EXPECT_NE(silu, o);
}

// ---- bf16 outputs (--precision bf16: the norms' and swiglu's outputs feed only matmuls) ----
// rmsnorm_fwd's y, glu_fwd's out and glu_bwd's dgate, dup written as bf16 hold, bit for bit,
// the op's own f32 outputs rounded to nearest even (tests/dtype_reference.h, not core/dtype's
// conversion); rstd is the f32 run's. Sizes below and above the threads' threshold (32K elements).
TEST_F(Fixture, NormAndSwiGluWriteBf16AsTheirF32OutputsRounded) {
  for (auto [T, d] : std::vector<std::array<int64_t, 2>>{{3, 5}, {9, 896}, {40, 4099}}) {
    SCOPED_TRACE(fmt::format("T={} d={}", T, d));
    const size_t n = size_t(T * d);
    auto x = randn(n, 20, 3.0f), w = randn(size_t(d), 21), g = randn(n, 22, 3.0f), u = randn(n, 23),
         dout = randn(n, 24);
    std::vector<float> y(n), rs(static_cast<size_t>(T)), rs16(static_cast<size_t>(T)), o(n), dg(n), du(n);
    std::vector<uint16_t> y16(n), o16(n), dg16(n), du16(n);
    auto f = [&](std::vector<float>& v) { return Tensor(v.data(), DType::F32, {T, d}, Tier::Host); };
    auto h = [&](std::vector<uint16_t>& v) { return Tensor(v.data(), DType::BF16, {T, d}, Tier::Host); };
    Tensor X = f(x), W(w.data(), DType::F32, {d}, Tier::Host), G = f(g), U = f(u), DO = f(dout);
    Tensor Y = f(y), Y16 = h(y16), O = f(o), O16 = h(o16), DG = f(dg), DU = f(du), DG16 = h(dg16), DU16 = h(du16);
    Tensor R(rs.data(), DType::F32, {T}, Tier::Host), R16(rs16.data(), DType::F32, {T}, Tier::Host);
    be->rmsnorm_fwd(X, W, 1e-6f, Y, R);
    be->rmsnorm_fwd(X, W, 1e-6f, Y16, R16);
    be->glu_fwd(G, U, O);
    be->glu_fwd(G, U, O16);
    be->glu_bwd(G, U, DO, DG, DU);
    be->glu_bwd(G, U, DO, DG16, DU16);
    EXPECT_EQ(rs16, rs);
    size_t flips = 0;  // elements whose f32 value is not itself a bf16 value (the rounding is exercised)
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(y16[i], ref::bf16_encode(y[i])) << "rmsnorm y at " << i;
      ASSERT_EQ(o16[i], ref::bf16_encode(o[i])) << "swiglu out at " << i;
      ASSERT_EQ(dg16[i], ref::bf16_encode(dg[i])) << "swiglu dgate at " << i;
      ASSERT_EQ(du16[i], ref::bf16_encode(du[i])) << "swiglu dup at " << i;
      flips += ref::bf16_value(y16[i]) != double(y[i]);
    }
    EXPECT_GT(flips, n / 2) << "the f32 outputs were bf16 values already";
    // GeGLU (Gemma 3's) the same way
    be->glu_fwd(G, U, O, Act::GeluTanh);
    be->glu_fwd(G, U, O16, Act::GeluTanh);
    be->glu_bwd(G, U, DO, DG, DU, Act::GeluTanh);
    be->glu_bwd(G, U, DO, DG16, DU16, Act::GeluTanh);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(o16[i], ref::bf16_encode(o[i])) << "geglu out at " << i;
      ASSERT_EQ(dg16[i], ref::bf16_encode(dg[i])) << "geglu dgate at " << i;
      ASSERT_EQ(du16[i], ref::bf16_encode(du[i])) << "geglu dup at " << i;
    }
  }
}

// scale(x, s, y): y = s x as an fp32 product, a bf16 y that product rounded (the reference's own
// rounding), from an f32 or bf16 x, and in place
TEST_F(Fixture, ScaleWritesEachDtypeAsTheF32ProductRounded) {
  const int64_t n = 5003;
  const float s = 0.22f;
  auto x = randn(size_t(n), 25, 3.0f);
  std::vector<uint16_t> xb(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xb[size_t(i)] = ref::bf16_encode(x[size_t(i)]);
  for (const bool from_bf16 : {false, true}) {
    SCOPED_TRACE(from_bf16 ? "x bf16" : "x f32");
    std::vector<float> y(static_cast<size_t>(n)), in_place = x;
    std::vector<uint16_t> y16(static_cast<size_t>(n)), in_place16 = xb;
    const Tensor X = from_bf16 ? Tensor(xb.data(), DType::BF16, {n}, Tier::Host) : Tensor(x.data(), DType::F32, {n}, Tier::Host);
    Tensor Y(y.data(), DType::F32, {n}, Tier::Host), Y16(y16.data(), DType::BF16, {n}, Tier::Host);
    be->scale(X, s, Y);
    be->scale(X, s, Y16);
    Tensor P = from_bf16 ? Tensor(in_place16.data(), DType::BF16, {n}, Tier::Host)
                         : Tensor(in_place.data(), DType::F32, {n}, Tier::Host);
    be->scale(P, s, P);
    size_t flips = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = size_t(i);
      const float want = (from_bf16 ? float(ref::bf16_value(xb[k])) : x[k]) * s;
      ASSERT_EQ(y[k], want) << i;
      ASSERT_EQ(y16[k], ref::bf16_encode(want)) << i;
      if (from_bf16) ASSERT_EQ(in_place16[k], ref::bf16_encode(want)) << i;
      else ASSERT_EQ(in_place[k], want) << i;
      flips += ref::bf16_value(y16[k]) != double(want);
    }
    EXPECT_GT(flips, size_t(n) / 2) << "the products were bf16 values already";
  }
}

}  // namespace
