// Per-op checks of the CPU backend: forward against an independent float64 reference written here,
// backward against central finite differences of that reference (loss = sum(out * R), R random).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "backend/backend.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

double dotv(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}


void expect_close(const std::vector<float>& got, const Vec& want, double tol, const char* what) {
  EXPECT_LE(rel_error(got, to_f(want)), tol) << what;
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
  expect_close(y, ref_linear(x, w, &b, T, in, out), 1e-6, "y");
  be->linear_bwd(X, W, DY, &DX, false, &DW, &DB);
  expect_close(dx, numgrad([&](const Vec& v) { return dotv(ref_linear(v, w, &b, T, in, out), R); }, x), 1e-5, "dx");
  expect_close(dw, numgrad([&](const Vec& v) { return dotv(ref_linear(x, v, &b, T, in, out), R); }, w), 1e-5, "dw");
  expect_close(db, numgrad([&](const Vec& v) { return dotv(ref_linear(x, w, &v, T, in, out), R); }, b), 1e-5, "db");
  // accumulation: a second backward adds to dw and (when asked) dx
  be->linear_bwd(X, W, DY, &DX, true, &DW, nullptr);
  Vec dw2 = numgrad([&](const Vec& v) { return 2 * dotv(ref_linear(x, v, &b, T, in, out), R); }, w);
  expect_close(dw, dw2, 1e-5, "dw accumulated");
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
  expect_close(dt, numgrad([&](const Vec& v) { return dotv(ref(v), R); }, table), 1e-6, "dtable");
  ids[3] = 6;
  EXPECT_THROW(be->embedding_fwd(I, TB, O), Error);
}

// ---- rmsnorm ----
TEST_F(Fixture, RmsNormForwardBackward) {
  const int64_t T = 5, d = 8;
  const double eps = 1e-5;
  Vec x = randd(T * d, 7), w = randd(d, 8), R = randd(T * d, 9);
  auto ref = [&](const Vec& xv, const Vec& wv) {
    Vec y(xv.size());
    for (int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += xv[size_t(t * d + i)] * xv[size_t(t * d + i)];
      const double r = 1.0 / std::sqrt(ss / double(d) + eps);
      for (int64_t i = 0; i < d; ++i) y[size_t(t * d + i)] = xv[size_t(t * d + i)] * r * wv[size_t(i)];
    }
    return y;
  };
  auto xf = to_f(x), wf = to_f(w), Rf = to_f(R);
  std::vector<float> y(T * d), rstd(T), dx(T * d), dw(d, 0.0f);
  Tensor X = Tensor::f32(xf.data(), {T, d}), W = Tensor::f32(wf.data(), {d}), Y = Tensor::f32(y.data(), {T, d});
  Tensor RS = Tensor::f32(rstd.data(), {T}), DY = Tensor::f32(Rf.data(), {T, d});
  Tensor DX = Tensor::f32(dx.data(), {T, d}), DW = Tensor::f32(dw.data(), {d});
  be->rmsnorm_fwd(X, W, float(eps), Y, RS);
  expect_close(y, ref(x, w), 1e-6, "y");
  be->rmsnorm_bwd(X, W, RS, DY, DX, false, DW);
  expect_close(dx, numgrad([&](const Vec& v) { return dotv(ref(v, w), R); }, x), 1e-5, "dx");
  expect_close(dw, numgrad([&](const Vec& v) { return dotv(ref(x, v), R); }, w), 1e-5, "dw");
}

// ---- rope ----
TEST_F(Fixture, RopeForwardBackward) {
  const int64_t T = 6, H = 3, D = 8;
  std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.001f};
  std::vector<int32_t> pos = {0, 1, 2, 7, 3, 100};
  const float scaling = 1.2f;
  Vec x = randd(T * H * D, 10), R = randd(T * H * D, 11);
  auto ref = [&](const Vec& xv) {
    Vec y(xv.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double ang = double(float(pos[size_t(t)]) * inv[size_t(i)]);
          const double c = std::cos(ang) * scaling, s = std::sin(ang) * scaling;
          const size_t b = size_t((t * H + h) * D);
          y[b + size_t(i)] = xv[b + size_t(i)] * c - xv[b + size_t(i + D / 2)] * s;
          y[b + size_t(i + D / 2)] = xv[b + size_t(i + D / 2)] * c + xv[b + size_t(i)] * s;
        }
    return y;
  };
  auto xf = to_f(x), g = to_f(R);
  Tensor X = Tensor::f32(xf.data(), {T, H, D}), P = Tensor::i32(pos.data(), {T}), G = Tensor::f32(g.data(), {T, H, D});
  RopeTable rt{inv.data(), scaling};
  be->rope_fwd(X, P, rt);
  expect_close(xf, ref(x), 1e-6, "y");
  be->rope_bwd(G, P, rt);
  expect_close(g, numgrad([&](const Vec& v) { return dotv(ref(v), R); }, x), 1e-5, "dx");
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
  be->swiglu_fwd(Gt, U, O);
  expect_close(o, ref(gt, up), 1e-6, "out");
  be->swiglu_bwd(Gt, U, DO, DG, DU);
  expect_close(dg, numgrad([&](const Vec& v) { return dotv(ref(v, up), R); }, gt), 1e-5, "dgate");
  expect_close(du, numgrad([&](const Vec& v) { return dotv(ref(gt, v), R); }, up), 1e-5, "dup");
}

}  // namespace
