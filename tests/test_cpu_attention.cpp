// Block attention and the fused loss against float64 references written here.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <iostream>
#include <cmath>
#include <functional>
#include <limits>

#include "backend/backend.h"
#include "dtype_reference.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
namespace ref = oomb::testing::ref;

namespace {


struct AttnCase {
  int64_t T, N, H, G, D, q_idx0;
  std::vector<int64_t> block_sizes;  // split of the N keys, in sequence order
  std::vector<int> order;            // order the blocks are handed to the op
  bool docs;
};

// q: (T, H, D) at indices q_idx0.., k, v: (N, G, D) at indices 0..N-1
// drop_key >= 0: the deliberately wrong variant that never sees that key (a negative control).
Vec ref_attention(const AttnCase& c, const Vec& q, const Vec& k, const Vec& v, const std::vector<int32_t>& qdoc,
                  const std::vector<int32_t>& kdoc, Vec* lse, int64_t drop_key = -1) {
  Vec o(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(c.D));
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t g = h / (c.H / c.G);
      std::vector<double> s;
      std::vector<int64_t> js;
      for (int64_t j = 0; j < c.N && j <= c.q_idx0 + t; ++j) {
        if ((c.docs && qdoc[size_t(t)] != kdoc[size_t(j)]) || j == drop_key) continue;
        double d = 0;
        for (int64_t i = 0; i < c.D; ++i) d += q[size_t((t * c.H + h) * c.D + i)] * k[size_t((j * c.G + g) * c.D + i)];
        s.push_back(d * scale);
        js.push_back(j);
      }
      double m = -std::numeric_limits<double>::infinity(), z = 0;
      for (double x : s) m = std::max(m, x);
      for (double x : s) z += std::exp(x - m);
      for (size_t a = 0; a < s.size(); ++a)
        for (int64_t i = 0; i < c.D; ++i)
          o[size_t((t * c.H + h) * c.D + i)] += std::exp(s[a] - m) / z * v[size_t((js[a] * c.G + g) * c.D + i)];
      if (lse) (*lse)[size_t(t * c.H + h)] = s.empty() ? -INFINITY : m + std::log(z);
    }
  return o;
}

// Bounds on the relative error against the float64 reference (finite differences for the
// gradients), each a small factor above the largest error measured over the cases below.
// (The bounds were 1e-6 for o and lse and 1e-5 for the gradients: 8-25x above these.)
constexpr double kTolO = 3e-7;    // o: measured <= 1.2e-7
constexpr double kTolLse = 1.5e-7;  // lse: measured <= 6.1e-8
constexpr double kTolDq = 1e-6;   // dq: measured <= 3.4e-7
constexpr double kTolDkv = 1e-6;  // dk: measured <= 4.1e-7, dv <= 1.8e-7

double report(const char* what, double e, double tol) {
  EXPECT_LE(e, tol) << what;
  std::cout << fmt::format("[ error    ] {:<12} {:.2e} (bound {:.1e})\n", what, e, tol);
  return e;
}

// A deliberately wrong result must fail the bound the kernel passes: the bound can tell them apart.
void expect_caught(const char* what, double e, double tol) {
  EXPECT_GT(e, tol) << "negative control '" << what << "' passes the bound: it would not catch the bug";
  std::cout << fmt::format("[ control  ] {:<28} {:.2e} > {:.1e}\n", what, e, tol);
}

// masked_blocks: indices (in sequence order) of blocks no query may see: their dk/dv must stay
// exactly zero. Every other block must receive gradient, so its comparison means something.
void run_case(const AttnCase& c, std::vector<int> masked_blocks = {}) {
  SCOPED_TRACE(::testing::Message() << "T=" << c.T << " N=" << c.N << " H=" << c.H << " G=" << c.G
                                    << " q_idx0=" << c.q_idx0 << " docs=" << c.docs);
  auto be = make_cpu_backend();
  Vec q = randd(size_t(c.T * c.H * c.D), 21), k = randd(size_t(c.N * c.G * c.D), 22),
      v = randd(size_t(c.N * c.G * c.D), 23), R = randd(size_t(c.T * c.H * c.D), 24);
  std::vector<int32_t> kdoc(size_t(c.N)), qdoc(size_t(c.T));
  for (int64_t j = 0; j < c.N; ++j) kdoc[size_t(j)] = int32_t(j / 4);  // documents of 4 tokens
  for (int64_t t = 0; t < c.T; ++t) qdoc[size_t(t)] = kdoc[size_t(std::min(c.q_idx0 + t, c.N - 1))];
  auto qf = to_f(q), kf = to_f(k), vf = to_f(v), Rf = to_f(R);
  std::vector<float> o(q.size()), lse(size_t(c.T * c.H)), dq(q.size()), dk(k.size(), 0.f), dv(v.size(), 0.f);
  std::vector<KVBlock> seq_blocks;
  int64_t start = 0;
  for (int64_t n : c.block_sizes) {
    KVBlock b;
    b.k = Tensor::f32(kf.data() + start * c.G * c.D, {n, c.G, c.D});
    b.v = Tensor::f32(vf.data() + start * c.G * c.D, {n, c.G, c.D});
    b.dk = Tensor::f32(dk.data() + start * c.G * c.D, {n, c.G, c.D});
    b.dv = Tensor::f32(dv.data() + start * c.G * c.D, {n, c.G, c.D});
    b.idx0 = start;
    b.doc = c.docs ? kdoc.data() + start : nullptr;
    seq_blocks.push_back(b);
    start += n;
  }
  ASSERT_EQ(start, c.N);
  std::vector<KVBlock> blocks;
  for (int i : c.order) blocks.push_back(seq_blocks[size_t(i)]);
  AttnArgs a{float(1.0 / std::sqrt(double(c.D))), c.q_idx0, c.docs ? qdoc.data() : nullptr};
  Tensor Q = Tensor::f32(qf.data(), {c.T, c.H, c.D}), O = Tensor::f32(o.data(), {c.T, c.H, c.D});
  Tensor L = Tensor::f32(lse.data(), {c.T, c.H}), DO = Tensor::f32(Rf.data(), {c.T, c.H, c.D});
  Tensor DQ = Tensor::f32(dq.data(), {c.T, c.H, c.D});
  be->attention_fwd(Q, blocks, a, O, L);
  Vec lse_ref(size_t(c.T * c.H));
  const Vec o_ref = ref_attention(c, q, k, v, qdoc, kdoc, &lse_ref);
  report("o", rel_error(o, to_f(o_ref)), kTolO);
  report("lse", rel_error(lse, to_f(lse_ref)), kTolLse);
  be->attention_bwd(Q, O, L, DO, blocks, a, DQ);
  auto loss = [&](const Vec& qq, const Vec& kk, const Vec& vv, const Vec& r) {
    Vec oo = ref_attention(c, qq, kk, vv, qdoc, kdoc, nullptr);
    double s = 0;
    for (size_t i = 0; i < oo.size(); ++i) s += oo[i] * r[i];
    return s;
  };
  const Vec dk_ref = numgrad([&](const Vec& x) { return loss(q, x, v, R); }, k);
  const Vec dv_ref = numgrad([&](const Vec& x) { return loss(q, k, x, R); }, v);
  report("dq", rel_error(dq, to_f(numgrad([&](const Vec& x) { return loss(x, k, v, R); }, q))), kTolDq);
  report("dk", rel_error(dk, to_f(dk_ref)), kTolDkv);
  report("dv", rel_error(dv, to_f(dv_ref)), kTolDkv);
  // each block receives gradient, or is one no query sees and stays exactly zero
  for (size_t b = 0; b < seq_blocks.size(); ++b) {
    const size_t lo = size_t(seq_blocks[b].idx0 * c.G * c.D), n = size_t(seq_blocks[b].k.numel());
    double ref_norm = 0;
    for (size_t i = lo; i < lo + n; ++i) ref_norm += dk_ref[i] * dk_ref[i] + dv_ref[i] * dv_ref[i];
    const bool masked = std::find(masked_blocks.begin(), masked_blocks.end(), int(b)) != masked_blocks.end();
    if (masked) {
      for (size_t i = lo; i < lo + n; ++i) ASSERT_TRUE(dk[i] == 0.0f && dv[i] == 0.0f) << "block " << b << " row " << i;
    } else {
      EXPECT_GT(ref_norm, 1e-6) << "block " << b << " receives no gradient: comparing it checks nothing";
    }
  }

  // Negative controls, each against the bound the kernel passed above:
  // (1) forward without one key the first query sees (its own position)
  const int64_t drop = std::min(c.q_idx0, c.N - 1);
  expect_caught("o with a key dropped", rel_error(o, to_f(ref_attention(c, q, k, v, qdoc, kdoc, nullptr, drop))), kTolO);
  // (2) dk/dv from a backward that drops one query (its rows of dout ignored): the last one that
  // sees two keys or more (a query that sees a single key adds nothing to dk)
  int64_t qdrop = c.T - 1;
  auto sees = [&](int64_t t) {
    int64_t n = 0;
    for (int64_t j = 0; j < c.N && j <= c.q_idx0 + t; ++j) n += !c.docs || qdoc[size_t(t)] == kdoc[size_t(j)];
    return n;
  };
  while (qdrop > 0 && sees(qdrop) < 2) --qdrop;
  Vec R_drop = R;
  for (int64_t i = 0; i < c.H * c.D; ++i) R_drop[size_t(qdrop * c.H * c.D + i)] = 0.0;
  expect_caught("dk with a query dropped",
                rel_error(dk, to_f(numgrad([&](const Vec& x) { return loss(q, x, v, R_drop); }, k))), kTolDkv);
  expect_caught("dv with a query dropped",
                rel_error(dv, to_f(numgrad([&](const Vec& x) { return loss(q, k, x, R_drop); }, v))), kTolDkv);
  // (3) the kernel itself, handed every block but one a query sees
  for (size_t skip = 0; skip < blocks.size(); ++skip) {
    const auto& sb = blocks[skip];
    const size_t seq_index = size_t(std::find_if(seq_blocks.begin(), seq_blocks.end(),
                                                 [&](const KVBlock& x) { return x.idx0 == sb.idx0; }) -
                                    seq_blocks.begin());
    if (std::find(masked_blocks.begin(), masked_blocks.end(), int(seq_index)) != masked_blocks.end()) continue;
    if (blocks.size() == 1) break;
    std::vector<KVBlock> fewer;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (i != skip) fewer.push_back(blocks[i]);
    std::vector<float> o2(q.size()), lse2(lse.size());
    Tensor O2 = Tensor::f32(o2.data(), {c.T, c.H, c.D}), L2 = Tensor::f32(lse2.data(), {c.T, c.H});
    be->attention_fwd(Q, fewer, a, O2, L2);
    expect_caught("o with a block skipped", rel_error(o2, to_f(o_ref)), kTolO);
    break;
  }
}

TEST(CpuAttention, MatchesReferenceOverBlocksInAnyOrder) {
  // queries 5..15 against keys 0..15: blocks of 3, 5, 8 handed over shuffled; kv-head ratios 1, 2, 4
  for (int64_t G : {4, 2, 1}) run_case({11, 16, 4, G, 8, 5, {3, 5, 8}, {2, 0, 1}, false});
}

TEST(CpuAttention, DocumentMaskAndSingleBlock) {
  run_case({16, 16, 2, 1, 8, 0, {16}, {0}, true});
  // queries 4..12 are in documents 1..3 of 4 tokens: keys 0..3 (document 0) get no gradient, so the
  // first block is split so that it is fully masked (checked to stay zero), and the blocks compared
  // for gradient all hold keys of the queries' documents
  run_case({9, 13, 4, 2, 6, 4, {4, 3, 6}, {2, 0, 1}, true}, {0});
  // partial tiles on every axis: 7 heads over 7 kv heads of odd dim 5, blocks of 1, 6 and 10 keys
  run_case({11, 17, 7, 7, 5, 6, {6, 1, 10}, {1, 2, 0}, true});
}

TEST(CpuAttention, KeysAfterEveryQueryContributeNothing) {
  // keys 0..15 with queries at 0..3: blocks beyond index 3 are fully masked
  run_case({4, 16, 2, 2, 4, 0, {4, 12}, {1, 0}, false}, {1});
}

// bf16 K/V blocks (pages with --kv-dtype bf16) are read as fp32: the same bits as f32 blocks that
// hold the same values, forward and backward, with bf16 and f32 blocks mixed in one call.
TEST(CpuAttention, Bf16BlocksGiveTheBitsOfF32BlocksOfTheSameValues) {
  auto be = make_cpu_backend();
  const int64_t T = 9, N = 21, H = 4, G = 2, D = 8, q0 = 12;
  const std::vector<int64_t> split = {7, 5, 9};
  auto q = to_f(randd(size_t(T * H * D), 51)), dout = to_f(randd(size_t(T * H * D), 52));
  auto k = to_f(randd(size_t(N * G * D), 53)), v = to_f(randd(size_t(N * G * D), 54));
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k16[i] = f32_to_bf16(k[i]), k[i] = bf16_to_f32(k16[i]);
    v16[i] = f32_to_bf16(v[i]), v[i] = bf16_to_f32(v16[i]);
  }
  struct Out {
    std::vector<float> o, lse, dq, dk, dv;
  };
  auto run = [&](bool bf16_blocks) {
    Out r{std::vector<float>(q.size()), std::vector<float>(size_t(T * H)), std::vector<float>(q.size()),
          std::vector<float>(k.size(), 0.f), std::vector<float>(v.size(), 0.f)};
    std::vector<KVBlock> blocks;
    int64_t j0 = 0;
    for (size_t b = 0; b < split.size(); ++b) {
      const int64_t n = split[b];
      const size_t at = size_t(j0 * G * D);
      KVBlock kb;
      const bool half = bf16_blocks && b != 1;  // the middle block stays f32
      kb.k = half ? Tensor(k16.data() + at, DType::BF16, {n, G, D}) : Tensor::f32(k.data() + at, {n, G, D});
      kb.v = half ? Tensor(v16.data() + at, DType::BF16, {n, G, D}) : Tensor::f32(v.data() + at, {n, G, D});
      kb.dk = Tensor::f32(r.dk.data() + at, {n, G, D});
      kb.dv = Tensor::f32(r.dv.data() + at, {n, G, D});
      kb.idx0 = j0;
      blocks.push_back(kb);
      j0 += n;
    }
    std::swap(blocks[0], blocks[2]);  // any order
    Tensor Q = Tensor::f32(q.data(), {T, H, D}), O = Tensor::f32(r.o.data(), {T, H, D}),
           L = Tensor::f32(r.lse.data(), {T, H}), DO = Tensor::f32(dout.data(), {T, H, D}),
           DQ = Tensor::f32(r.dq.data(), {T, H, D});
    const AttnArgs a{1.0f / std::sqrt(float(D)), q0, nullptr};
    be->attention_fwd(Q, blocks, a, O, L);
    be->attention_bwd(Q, O, L, DO, blocks, a, DQ);
    return r;
  };
  const Out f = run(false), h = run(true);
  EXPECT_EQ(f.o, h.o);
  EXPECT_EQ(f.lse, h.lse);
  EXPECT_EQ(f.dq, h.dq);
  EXPECT_EQ(f.dk, h.dk);
  EXPECT_EQ(f.dv, h.dv);
  EXPECT_TRUE(std::any_of(f.dk.begin(), f.dk.end(), [](float x) { return x != 0.0f; }));

  // K and V of one block must share a dtype
  std::vector<float> o(q.size()), lse(size_t(T * H));
  KVBlock bad;
  bad.k = Tensor(k16.data(), DType::BF16, {N, G, D});
  bad.v = Tensor::f32(v.data(), {N, G, D});
  Tensor Q = Tensor::f32(q.data(), {T, H, D}), O = Tensor::f32(o.data(), {T, H, D}), L = Tensor::f32(lse.data(), {T, H});
  EXPECT_EQ(error_of([&] { be->attention_fwd(Q, std::span<const KVBlock>(&bad, 1), AttnArgs{1.0f, q0, nullptr}, O, L); }),
            "attention_fwd: block 0 v is f32 but k is bf16");
}

// cast (f32 <-> bf16, round to nearest even) and round_bf16 against the IEEE definition (every
// pattern and many more values: test_dtype)
TEST(CpuOps, CastAndRoundBf16) {
  auto be = make_cpu_backend();
  auto x = to_f(randd(1000, 61, 3.0));
  x[0] = 1.00390625f;  // a tie: 1 + 2^-8 rounds to even (1.0)
  x[1] = -0.0f, x[2] = 1e-40f, x[3] = std::numeric_limits<float>::infinity();
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size()), r = x;
  Tensor X = Tensor::f32(x.data(), {int64_t(x.size())}), Hh(h.data(), DType::BF16, {int64_t(x.size())}),
         B = Tensor::f32(back.data(), {int64_t(x.size())}), R = Tensor::f32(r.data(), {int64_t(x.size())});
  be->cast(X, Hh);
  be->cast(Hh, B);
  be->round_bf16(R);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], ref::bf16_encode(x[i])) << i;  // the independent reference (tests/dtype_reference.h)
    EXPECT_EQ(back[i], float(ref::bf16_value(h[i]))) << i;
    EXPECT_EQ(r[i], back[i]) << i;
  }
  EXPECT_EQ(back[0], 1.0f);
  std::vector<float> small(3);
  Tensor S = Tensor::f32(small.data(), {3});
  EXPECT_EQ(error_of([&] { be->cast(X, S); }), "cast: src (1000) and dst (3) differ in size");
}

// ---- fused lm_head + cross-entropy ----
TEST(CpuLoss, FusedHeadMatchesReferenceAndIgnoresTargets) {
  auto be = make_cpu_backend();
  const int64_t T = 300, d = 6, V = 11;  // T > the backend's tile of 256 tokens: two tiles
  Vec h = randd(size_t(T * d), 31), w = randd(size_t(V * d), 32);
  std::vector<int32_t> tg(T);
  for (int64_t t = 0; t < T; ++t) tg[size_t(t)] = t % 7 == 3 ? -1 : int32_t((t * 5) % V);
  auto ref = [&](const Vec& hh, const Vec& ww, int64_t* hits) {
    double loss = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (tg[size_t(t)] < 0) continue;
      Vec lg(static_cast<size_t>(V), 0.0);
      int64_t arg = 0;
      for (int64_t v = 0; v < V; ++v) {
        for (int64_t i = 0; i < d; ++i) lg[size_t(v)] += hh[size_t(t * d + i)] * ww[size_t(v * d + i)];
        if (lg[size_t(v)] > lg[size_t(arg)]) arg = v;
      }
      double z = 0;
      for (double x : lg) z += std::exp(x - lg[size_t(arg)]);
      loss += lg[size_t(arg)] + std::log(z) - lg[size_t(tg[size_t(t)])];
      if (hits) *hits += arg == tg[size_t(t)];
    }
    return loss;
  };
  auto hf = to_f(h), wf = to_f(w);
  std::vector<float> dh(h.size()), dw(w.size(), 0.f);
  Tensor H = Tensor::f32(hf.data(), {T, d}), W = Tensor::f32(wf.data(), {V, d}), TG = Tensor::i32(tg.data(), {T});
  Tensor DH = Tensor::f32(dh.data(), {T, d}), DW = Tensor::f32(dw.data(), {V, d});
  const float scale = 0.5f;
  int64_t hits = 0, ref_hits = 0;
  const double loss = be->lm_head_xent(H, W, TG, scale, &DH, &DW, &hits);
  const double want_loss = ref(h, w, &ref_hits);
  report("loss", std::abs(loss - want_loss) / std::abs(want_loss), 6e-9);  // measured 1.9e-9 (was 1e-5)
  EXPECT_EQ(hits, ref_hits);
  Vec gh = numgrad([&](const Vec& x) { return scale * ref(x, w, nullptr); }, h);
  Vec gw = numgrad([&](const Vec& x) { return scale * ref(h, x, nullptr); }, w);
  report("dh", rel_error(dh, to_f(gh)), 3e-7);  // measured 8.9e-8 (was 1e-5)
  report("dw", rel_error(dw, to_f(gw)), 6e-7);  // measured 1.9e-7 (was 1e-5)
  tg[0] = int32_t(V);
  EXPECT_THROW(be->lm_head_xent(H, W, TG, 1.0f, nullptr, nullptr, nullptr), Error);
}

// ---- optimizers ----
TEST(CpuOptim, AdamWMatchesTheDecoupledUpdate) {
  auto be = make_cpu_backend();
  const int64_t n = 10;
  auto p0 = randn(n, 41), g = randn(n, 42);
  std::vector<float> p = p0, m(n, 0.f), v(n, 0.f);
  Tensor P = Tensor::f32(p.data(), {n}), G = Tensor::f32(g.data(), {n}), M = Tensor::f32(m.data(), {n}),
         VV = Tensor::f32(v.data(), {n});
  const Backend::AdamW a{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  be->adamw_step(P, G, M, VV, a);
  be->adamw_step(P, G, M, VV, {a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, 2});
  for (int64_t i = 0; i < n; ++i) {  // two steps written out in float64
    double pi = p0[size_t(i)], mi = 0, vi = 0;
    const double gi = g[size_t(i)];
    for (int s = 1; s <= 2; ++s) {
      mi = 0.9 * mi + 0.1 * gi;
      vi = 0.95 * vi + 0.05 * gi * gi;
      pi *= 1 - 1e-2 * 0.1;
      pi -= 1e-2 * (mi / (1 - std::pow(0.9, s))) / (std::sqrt(vi / (1 - std::pow(0.95, s))) + 1e-8);
    }
    EXPECT_NEAR(p[size_t(i)], pi, 2e-7);  // measured <= 4.0e-8: fp32 against the formula in double
  }
  std::vector<float> q = p0;
  Tensor Qp = Tensor::f32(q.data(), {n});
  be->sgd_step(Qp, G, 0.5f);
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(q[size_t(i)], p0[size_t(i)] - 0.5f * g[size_t(i)]);
}

}  // namespace
