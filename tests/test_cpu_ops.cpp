// Per-op checks of the CPU backend: forward against an independent float64 reference written here,
// backward against central finite differences of that reference (loss = sum(out * R), R random).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>

#include "backend/backend.h"
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


// The relative error against the float64 reference, compared with its bound and printed, so the
// measured value beside each bound below can be re-read from the test's output.
void expect_close(const std::vector<float>& got, const Vec& want, double tol, const std::string& what) {
  const double e = rel_error(got, to_f(want));
  EXPECT_LE(e, tol) << what;
  std::cout << fmt::format("[ error    ] {:<32} {:.2e} (bound {:.1e})\n", what, e, tol);
}

struct Fixture : ::testing::Test {
  std::unique_ptr<Backend> be = make_cpu_backend();
};

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

// ---- the row-wise ops at real model widths ----
// Widths above any kernel's block size (Qwen2-0.5B's 896, Qwen2-7B's 3584, Llama's 4096, 5120) and
// an odd one, several rows each, so every row loop runs more than once and ends on a partial step.
// References: float64, gradients written out analytically (finite differences over 5120-wide rows
// would cost too much; the small cases above check the same formulas by differences).
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
