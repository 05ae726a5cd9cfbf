// Attention on CUDA against the CPU reference: the fp32 kernels (the GPU's reference), oomb's
// tensor-core kernels under --precision bf16, and dense calls through cuDNN's fused SDPA, over
// blocks of keys in any order, documents, windows, per-group masks, bf16 pages and folds over
// several calls. Every device output sits between sentinel bytes that must survive the op. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <span>

#include "backend/backend.h"
#if defined(OOMB_SIMT) || defined(OOMB_HAVE_CUDA)
#include "backend/cuda/cudnn/cudnn_sdpa.h"
#ifdef OOMB_SIMT
#include "simt/cudnn_calls.h"
#endif
#define OOMB_TEST_CUDNN 1
#endif
#include "core/dtype.h"
#include "cuda_pairs.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

// One attention case on both backends. tc: the tensor-core path (AttnArgs::bf16) with its inputs
// rounded to bf16 as under --precision bf16 (q, dout, every block's K/V, and the o the backward
// reads, which both backends then take from the CPU's forward, with its lse).
struct AttnCase {
  int64_t T, H, G, D;
  std::vector<int64_t> lens;  // earlier blocks' lengths, then (own) the chunk's own T keys
  bool docs;
  DType grad;  // of the earlier blocks; the chunk's own are f32, as in the model
  bool own = true;  // without them and with documents, some queries see no key at all
  DType kv = DType::F32;  // K/V of the earlier blocks (pages with --kv-dtype bf16); the chunk's own f32
  bool masked = false;    // earlier block b read by kv head b % G alone (KVBlock::heads, sparse per group)
  int64_t window = 0;     // sliding window
  // the GPU's forward and backward as a fold over this many calls (blocks in ascending order, split
  // evenly, as --offload kv streams page groups), against the CPU's one call; off_cudnn: the call
  // (of those) whose blocks carry document ids with no query's (nothing masked), which keeps it off
  // cuDNN's route and on oomb's kernels
  int64_t fold_calls = 1;
  int64_t off_cudnn = -1;
  int64_t own_blocks = 1;  // the chunk's own keys in this many blocks (as the model splits them)
};
const std::vector<AttnCase>& attention_cases() {
  static const std::vector<AttnCase> cases = {
      {5, 2, 1, 8, {}, false, DType::F32},
      {33, 4, 2, 16, {16, 16, 7}, false, DType::F32},
      {64, 6, 2, 64, {128, 3, 128}, true, DType::F32},
      {70, 8, 8, 128, {128, 100}, false, DType::BF16},
      {17, 4, 1, 256, {40}, true, DType::F32},
      {30, 4, 2, 32, {40}, true, DType::BF16, false},
      {33, 4, 2, 16, {16, 16, 7}, false, DType::F32, true, DType::BF16},
      {64, 6, 2, 64, {128, 3, 128}, true, DType::BF16, true, DType::BF16},
      {33, 4, 2, 16, {16, 16, 7}, false, DType::F32, true, DType::F32, true},
      // several 64-key and 64-query tiles: whole tiles, a window across them, head dims padded
      {150, 4, 2, 64, {128, 128, 77}, false, DType::F32, true, DType::F32, false, 100},
      {130, 8, 2, 128, {256, 64}, true, DType::F32, true, DType::BF16},
      {90, 4, 4, 48, {64, 64}, false, DType::F32},
      // a head dim neither of 8 nor 4 (bf16 pages and q, dO by plain loads, not cp.async)
      {70, 4, 2, 10, {64, 20}, false, DType::F32, true, DType::BF16}};
  return cases;
}

// the largest tensor-core error of each output over the cases (the control below)
std::map<std::string, double> worst_tc;

// tc: bf16 inputs, attention under --precision bf16 on `gpu` (default: the backend as configured);
// folds: also check that a fold over two calls gives one call's bits (oomb's own kernels: cuDNN's
// route splits a fold's keys into other runs than one call's)
void attention_case(const AttnCase& c, bool tc, Backend* gpu = nullptr, bool folds = true) {
  Backend &C = *backends().cpu, &G = gpu ? *gpu : *backends().cuda;
  // another backend's stream: the Pairs' copies (backends().cuda's stream) must wait for its work
  auto done = [&] { G.synchronize(); };
  SCOPED_TRACE(fmt::format("T={} H={} G={} D={} blocks={} docs={} grad={} kv={} window={} tc={}", c.T, c.H, c.G,
                           c.D, c.lens.size(), c.docs, dtype_name(c.grad), dtype_name(c.kv), c.window, tc));
  auto to_bf16_values = [&](Pair& p) {  // round an f32 tensor's values to bf16 (tc) and upload them
    if (!tc || p.h.dtype != DType::F32) return;
    for (int64_t i = 0; i < p.h.numel(); ++i) p.h.f()[i] = bf16_to_f32(f32_to_bf16(p.h.f()[i]));
    p.upload();
  };
  // the measured fp32 bound, or under tc bf16's: P and dS each round to bf16 once (2^-9 relative at
  // most, 1.1e-3 rms), which moves o, dq and what dK/dV add by about that; 5e-3 leaves room
  auto check = [&](const char* op, double e, double fp32, double bf16 = 5e-3) {
    report(op, e, tc ? bf16 : fp32);
    if (tc) worst_tc[op] = std::max(worst_tc[op], e);
  };
  std::vector<int64_t> lens = c.lens;
  const size_t earlier = lens.size();
  if (c.own)
    for (int64_t i = 0; i < c.own_blocks; ++i)
      lens.push_back(c.T * (i + 1) / c.own_blocks - c.T * i / c.own_blocks);
  int64_t N = 0;
  for (int64_t l : lens) N += l;
  const int64_t q0 = c.own ? N - c.T : N;  // without its own keys the chunk follows the blocks
  std::vector<std::unique_ptr<Pair>> k, v, dk, dv;
  Pair docs(DType::I32, {q0 + c.T});
  for (int64_t i = 0; i < q0 + c.T; ++i) docs.h.as<int32_t>()[i] = int32_t(i / 23);  // documents of 23 tokens
  if (!c.own)  // each query its own document, none of the blocks': no query sees a key
    for (int64_t t = 0; t < c.T; ++t) docs.h.as<int32_t>()[q0 + t] = int32_t(1000 + t);
  docs.upload();
  std::vector<KVBlock> hb, db;
  int64_t at = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    for (auto* vec : {&k, &v, &dk, &dv})
      vec->push_back(std::make_unique<Pair>(DType::F32, std::initializer_list<int64_t>{lens[b], c.G, c.D}));
    const bool own_block = c.own && b >= earlier;
    if (c.grad == DType::BF16 && !own_block) {
      dk.back() = std::make_unique<Pair>(DType::BF16, std::initializer_list<int64_t>{lens[b], c.G, c.D});
      dv.back() = std::make_unique<Pair>(DType::BF16, std::initializer_list<int64_t>{lens[b], c.G, c.D});
      for (auto* g : {dk.back().get(), dv.back().get()}) {  // accumulated into
        for (int64_t i = 0; i < g->h.numel(); ++i) g->h.as<uint16_t>()[i] = f32_to_bf16(float(i % 13) * 0.1f);
        g->upload();
      }
    } else {
      dk.back()->randn(100 + b), dv.back()->randn(200 + b);  // accumulated into
    }
    if (c.kv == DType::BF16 && !own_block) {
      k.back() = std::make_unique<Pair>(DType::BF16, std::initializer_list<int64_t>{lens[b], c.G, c.D});
      v.back() = std::make_unique<Pair>(DType::BF16, std::initializer_list<int64_t>{lens[b], c.G, c.D});
      for (auto [g, seed] : {std::pair{k.back().get(), 300 + b}, std::pair{v.back().get(), 400 + b}}) {
        const auto r = oomb::testing::randn(size_t(g->h.numel()), seed);
        for (size_t i = 0; i < r.size(); ++i) g->h.as<uint16_t>()[i] = f32_to_bf16(r[i]);
        g->upload();
      }
    } else {
      k.back()->randn(300 + b), v.back()->randn(400 + b);
      to_bf16_values(*k.back()), to_bf16_values(*v.back());
    }
    const int32_t* hd = c.docs ? docs.h.as<int32_t>() + at : nullptr;
    const int32_t* dd = c.docs ? docs.d.as<int32_t>() + at : nullptr;
    hb.push_back({k.back()->h, v.back()->h, dk.back()->h, dv.back()->h, at, hd});
    db.push_back({k.back()->d, v.back()->d, dk.back()->d, dv.back()->d, at, dd});
    if (c.masked && !own_block) hb.back().heads = db.back().heads = uint64_t(1) << (b % size_t(c.G));
    at += lens[b];
  }
  std::reverse(hb.begin(), hb.end());  // any order folds the same
  std::reverse(db.begin(), db.end());
  Pair q(DType::F32, {c.T, c.H, c.D}), o(DType::F32, {c.T, c.H, c.D}), lse(DType::F32, {c.T, c.H});
  q.randn(7);
  to_bf16_values(q);
  const float scale = float(1.0 / std::sqrt(double(c.D)));
  AttnArgs ha{scale, q0, c.docs ? docs.h.as<int32_t>() + q0 : nullptr, c.window};
  AttnArgs da{scale, q0, c.docs ? docs.d.as<int32_t>() + q0 : nullptr, c.window};
  ha.bf16 = da.bf16 = tc;
  // the GPU's calls: one over every block, or a fold over groups of them
  std::vector<std::vector<KVBlock>> groups;
  if (c.fold_calls > 1) {
    std::vector<KVBlock> asc = db;
    std::sort(asc.begin(), asc.end(), [](const KVBlock& x, const KVBlock& y) { return x.idx0 < y.idx0; });
    for (int64_t i = 0; i < c.fold_calls; ++i) {
      const size_t lo = asc.size() * size_t(i) / size_t(c.fold_calls), hi = asc.size() * size_t(i + 1) / size_t(c.fold_calls);
      groups.emplace_back(asc.begin() + std::ptrdiff_t(lo), asc.begin() + std::ptrdiff_t(hi));
      if (i == c.off_cudnn)
        for (KVBlock& b : groups.back()) b.doc = docs.d.as<int32_t>() + b.idx0;
    }
  }
  Pair run_sum(DType::F32, {c.T, c.H});
  auto each_call = [&](const std::function<void(std::span<const KVBlock>, const AttnArgs&)>& call) {
    if (groups.empty()) return call(db, da);
    for (size_t i = 0; i < groups.size(); ++i) {
      AttnArgs a = da;
      a.first = i == 0, a.last = i + 1 == groups.size();
      a.run_sum = run_sum.d;
      call(groups[i], a);
    }
  };
  C.attention_fwd(q.h, hb, ha, o.h, lse.h);
  each_call([&](std::span<const KVBlock> b, const AttnArgs& a) { G.attention_fwd(q.d, b, a, o.d, lse.d); });
  done();
  check("attention_fwd", err(o), 2e-6);  // measured <= 3.1e-7 (H100, 2026-11-24)
  report("attention lse", lse_err(lse), tc ? 1e-5 : 5e-7);  // measured <= 5.0e-8; tc: S's sums reordered
  if (folds && c.lens.size() >= 2) {  // a fold over two calls (pages streaming in groups): one call's bits
    Pair o2(DType::F32, {c.T, c.H, c.D}), lse2(DType::F32, {c.T, c.H}), run(DType::F32, {c.T, c.H});
    AttnArgs a1 = da, a2 = da;
    a1.last = false, a2.first = false;
    a1.run_sum = a2.run_sum = run.d;
    const size_t half = db.size() / 2;
    G.attention_fwd(q.d, std::span<const KVBlock>(db).first(half), a1, o2.d, lse2.d);
    done();
    G.attention_fwd(q.d, std::span<const KVBlock>(db).subspan(half), a2, o2.d, lse2.d);
    done();
    // the state crosses between the calls as it is: the bits of one call
    EXPECT_EQ(o2.download(), o.download()) << "a fold of two calls";
    EXPECT_EQ(lse2.download(), lse.download()) << "a fold of two calls";
  }
  if (!c.own) {  // no key is visible to any query (the GPU's forward, before the CPU's o goes up)
    for (float l : lse.device_f32()) EXPECT_TRUE(std::isinf(l) && l < 0);
    for (float f : o.device_f32()) EXPECT_EQ(f, 0.0f);
  }
  if (tc) {  // the backward reads the policy's o (bf16 values) and one lse on both sides
    to_bf16_values(o);
    lse.upload();
  }
  Pair dout(DType::F32, {c.T, c.H, c.D}), dq(DType::F32, {c.T, c.H, c.D});
  dout.randn(8);
  to_bf16_values(dout);
  // the gradient rows before the backward adds into them (tc: what was added is compared)
  std::vector<std::vector<char>> before_dk, before_dv;
  for (size_t b = 0; b < lens.size(); ++b) before_dk.push_back(dk[b]->download()), before_dv.push_back(dv[b]->download());
  C.attention_bwd(q.h, o.h, lse.h, dout.h, hb, ha, dq.h);
  each_call([&](std::span<const KVBlock> b, const AttnArgs& a) { G.attention_bwd(q.d, o.d, lse.d, dout.d, b, a, dq.d); });
  done();
  check("attention dq", err(dq), 2e-6);  // measured <= 3.8e-7
  if (!c.own) {  // no key is visible to any query
    for (float f : dq.device_f32()) EXPECT_EQ(f, 0.0f);
  }
  for (size_t b = 0; b < lens.size(); ++b) {
    if (!c.own) {  // no query sees these blocks: nothing may be added (a relative error would compare
                   // the accumulators' initial values with themselves and check nothing)
      for (Pair* g : {dk[b].get(), dv[b].get()})
        EXPECT_EQ(g->download(), std::vector<char>(g->host.begin(), g->host.end() - 1)) << "block " << b;
      continue;
    }
    const bool grad16 = dk[b]->h.dtype == DType::BF16;
    auto values = [&](const std::vector<char>& raw) {  // f32 or bf16 gradient rows as floats
      std::vector<float> f(raw.size() / (grad16 ? 2 : 4));
      for (size_t i = 0; i < f.size(); ++i) {
        if (!grad16) {
          std::memcpy(&f[i], raw.data() + 4 * i, 4);
          continue;
        }
        uint16_t u;
        std::memcpy(&u, raw.data() + 2 * i, 2);
        f[i] = bf16_to_f32(u);
      }
      return f;
    };
    if (tc) {  // what the backward added, on each side: the rows' own values would hide its error
      for (Pair* g : {dk[b].get(), dv[b].get()}) {
        const auto before = values(g == dk[b].get() ? before_dk[b] : before_dv[b]);
        auto got = values(g->download()), want = values(std::vector<char>(g->host.begin(), g->host.end() - 1));
        for (size_t i = 0; i < before.size(); ++i) got[i] -= before[i], want[i] -= before[i];
        // bf16 rows: each side rounds its sum once, and sums ~3e-3 apart round one ulp apart now and
        // then, an ulp of the row (~2^-8 of it) being ~4e-2 of what was added here
        check(g == dk[b].get() ? "attention dk added" : "attention dv added", rel_error(got, want), 0, grad16 ? 3e-2 : 5e-3);
      }
      continue;
    }
    if (grad16) {  // one rounding each: compare as values
      auto widen = values;
      for (Pair* g : {dk[b].get(), dv[b].get()}) {
        const auto want = widen(std::vector<char>(g->host.begin(), g->host.end() - 1));
        // measured <= 1.1e-6 (a flipped rounding here and there); a query dropped from the backward
        // gives ~7e-3 (scripts/gpu_session.sh runs that mutant)
        check(g == dk[b].get() ? "attention dk bf16" : "attention dv bf16", rel_error(widen(g->download()), want),
              1e-5);
      }
    } else {
      check("attention dk", err(*dk[b]), 1e-6);  // measured <= 1.8e-7
      check("attention dv", err(*dv[b]), 1e-6);  // measured <= 1.3e-7
    }
  }
  if (tc) {  // with bf16 copies of q and dO beside them (the model's under --precision bf16): the same bits
    Pair q16(DType::BF16, {c.T, c.H, c.D}), do16(DType::BF16, {c.T, c.H, c.D}), dq16(DType::F32, {c.T, c.H, c.D});
    for (auto [from, to] : {std::pair{&q, &q16}, std::pair{&dout, &do16}}) {
      for (int64_t i = 0; i < from->h.numel(); ++i) to->h.as<uint16_t>()[i] = f32_to_bf16(from->h.f()[i]);
      to->upload();
    }
    std::vector<std::vector<char>> after_dk, after_dv;
    for (size_t b = 0; b < lens.size(); ++b) {  // the gradient rows as they were before the backward
      after_dk.push_back(dk[b]->download()), after_dv.push_back(dv[b]->download());
      backends().cuda->copy(dk[b]->d.data, Tier::Device, before_dk[b].data(), Tier::Host, before_dk[b].size());
      backends().cuda->copy(dv[b]->d.data, Tier::Device, before_dv[b].data(), Tier::Host, before_dv[b].size());
    }
    each_call([&](std::span<const KVBlock> b, const AttnArgs& a) {
      AttnArgs with16 = a;
      with16.q16 = q16.d, with16.dout16 = do16.d;
      G.attention_bwd(q.d, o.d, lse.d, dout.d, b, with16, dq16.d);
    });
    done();
    EXPECT_EQ(dq16.download(), dq.download()) << "dq with bf16 copies of q and dO";
    for (size_t b = 0; b < lens.size(); ++b) {
      EXPECT_EQ(dk[b]->download(), after_dk[b]) << "dk of block " << b << " with bf16 copies of q and dO";
      EXPECT_EQ(dv[b]->download(), after_dv[b]) << "dv of block " << b << " with bf16 copies of q and dO";
    }
  }
  if (folds && lens.size() >= 2) {  // dq over a fold of two calls (the second accumulates): one call's bits
    Pair dq2(DType::F32, {c.T, c.H, c.D});
    AttnArgs a1 = da, a2 = da;
    a1.last = false, a2.first = false;
    const size_t half = db.size() / 2;
    G.attention_bwd(q.d, o.d, lse.d, dout.d, std::span<const KVBlock>(db).first(half), a1, dq2.d);
    done();
    G.attention_bwd(q.d, o.d, lse.d, dout.d, std::span<const KVBlock>(db).subspan(half), a2, dq2.d);
    done();
    EXPECT_EQ(dq2.download(), dq.download()) << "dq over a fold of two calls";
  }
}

}  // namespace

TEST(CudaAttention, AttentionOverBlocks) {
  REQUIRE_GPU();
  for (const AttnCase& c : attention_cases()) attention_case(c, false);
}

// The tensor-core kernels (kernels_attention_mma_fwd.cu, _bwd.cu, --precision bf16) against the CPU on the same
// bf16 inputs: within bf16's error, and different from fp32 by P's or dS's rounding in each output
// (o, dq, dK, dV: a run of the fp32 kernels, which the dispatch could fall back to, shows ~1e-7). Head dims
// above 128 take the fp32 kernels and are left out. Not yet run on a GPU: the bounds are bf16's
// rounding, to be tightened to what the first run measures.
TEST(CudaAttention, AttentionOnTensorCoresWithinBf16) {
  REQUIRE_GPU();
  worst_tc.clear();
  for (const AttnCase& c : attention_cases())
    if (c.D <= 128) attention_case(c, true, backends().mma.get());
  for (const char* op : {"attention_fwd", "attention dq", "attention dk added", "attention dv added"}) {
    EXPECT_GT(worst_tc[op], 1e-5) << op << " shows no bf16 rounding of P or dS: did the tensor-core kernels run?";
    std::cout << fmt::format("[ parity   ] tensor cores: {} worst rel. error {:.2e}\n", op, worst_tc[op]);
  }
}

// Dense attention under bf16 through cuDNN's fused SDPA (cudnn_attention.h: runs of keys gathered
// into bf16, one cuDNN call each, (o, lse) merged, dk and dv folded into f32 and bf16 gradient
// rows, dq summed) against the CPU on the same bf16 inputs, within bf16's error. The backend is
// pinned to cuDNN (OOMB_CUDA_ATTENTION=cudnn), so a call that did not take the route fails. The
// cases: one causal run alone; GQA with a partial earlier run; MHA over four runs into bf16
// gradient rows; bf16 K/V pages; head dim 128. On simt the cuDNN stand-in computes in float64
// (tests/simt/cudnn_sdpa.cpp): this checks the route's plumbing; cuDNN's own numerics, on a GPU.
TEST(CudaAttention, DenseAttentionThroughCudnnWithinBf16) {
  REQUIRE_GPU();
#ifdef OOMB_TEST_CUDNN
  std::string why;
  if (!cuda::cudnn::available(&why)) GTEST_SKIP() << "cuDNN: " << why;
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
  const std::vector<AttnCase> dense = {
      {5, 2, 1, 8, {}, false, DType::F32},
      {33, 4, 2, 16, {16, 16, 7}, false, DType::F32},
      {70, 8, 8, 128, {128, 100}, false, DType::BF16},
      {33, 4, 2, 16, {16, 16, 7}, false, DType::F32, true, DType::BF16},
      {64, 6, 2, 64, {128, 3, 128}, false, DType::BF16, true, DType::BF16},
  };
  setenv("OOMB_CUDNN_MIN_QUERIES", "1", 1);  // these small calls too (the default keeps < 128 off cuDNN)
  for (const AttnCase& c : dense) attention_case(c, true, backends().cudnn.get(), false);
  // folds over calls (--offload kv's page groups): {b0}, {b1, b2}, {b3, the chunk's own keys}; the
  // state crosses calls as oomb's tensor-core kernels keep it, so one call may take those instead
  AttnCase fold{33, 4, 2, 16, {16, 16, 16, 7}, false, DType::F32};
  fold.fold_calls = 3;
  AttnCase fold16 = fold;  // bf16 gradient and K/V pages
  fold16.grad = fold16.kv = DType::BF16;
  // {b0, b1: 56 keys, two runs}, {b2, b3}, {the chunk's own keys alone, in two blocks}
  AttnCase fold_long{33, 4, 2, 16, {40, 16, 16, 7}, false, DType::F32};
  fold_long.fold_calls = 3, fold_long.own_blocks = 2;
#ifdef OOMB_SIMT
  const size_t before = cuda::cudnn::simt_calls();
#endif
  for (const AttnCase& c : {fold, fold16, fold_long}) attention_case(c, true, backends().cudnn.get(), false);
#ifdef OOMB_SIMT
  const size_t all_calls = cuda::cudnn::simt_calls() - before;
#endif
  auto mixed = cuda_backend_with_attention("auto");
  for (AttnCase c : {fold, fold16}) {
    c.off_cudnn = 1;  // the middle call on oomb's kernels, between two of cuDNN's
    attention_case(c, true, mixed.get(), false);
  }
#ifdef OOMB_SIMT
  const size_t some_calls = cuda::cudnn::simt_calls() - before - all_calls;
  EXPECT_GT(some_calls, 0u) << "no call of the mixed folds took cuDNN";
  EXPECT_LT(some_calls, all_calls) << "the middle calls took cuDNN too";
  std::cout << fmt::format("[ cudnn    ] folds: {} cuDNN calls, {} with the middle calls on oomb's kernels\n",
                           all_calls, some_calls);
#endif
  {  // the chunk's queries in blocks (cudnn_query_block), each with its own runs: at T = 33, blocks
     // of 16, 16 and 1, the own keys' causal run growing with each; whole calls and folds
    const ScopedEnv blocks("OOMB_CUDNN_QUERY_BLOCK", "16");
    for (const AttnCase& c : dense) attention_case(c, true, backends().cudnn.get(), false);
#ifdef OOMB_SIMT
    const size_t at = cuda::cudnn::simt_calls();
#endif
    for (const AttnCase& c : {fold, fold16, fold_long}) attention_case(c, true, backends().cudnn.get(), false);
#ifdef OOMB_SIMT
    EXPECT_GT(cuda::cudnn::simt_calls() - at, all_calls) << "the same folds in blocks made no more calls";
#endif
  }
  // q's bf16 copy is made once per fold: a new fold over the same q tensor, its values changed, sees them
  {
    Pair q(DType::F32, {40, 4, 16}), k(DType::F32, {40, 2, 16}), v(DType::F32, {40, 2, 16});
    Pair o(DType::F32, {40, 4, 16}), lse(DType::F32, {40, 4});
    k.randn(51), v.randn(52);
    AttnArgs a{0.25f, 0};
    a.bf16 = true;
    const std::vector<KVBlock> hb{{k.h, v.h, Tensor(), Tensor(), 0}}, db{{k.d, v.d, Tensor(), Tensor(), 0}};
    for (uint64_t seed : {53, 54}) {
      q.randn(seed);
      for (int64_t i = 0; i < q.h.numel(); ++i) q.h.f()[i] = bf16_to_f32(f32_to_bf16(q.h.f()[i]));
      q.upload();
      backends().cpu->attention_fwd(q.h, hb, a, o.h, lse.h);
      backends().cudnn->attention_fwd(q.d, db, a, o.d, lse.d);
      backends().cudnn->synchronize();
      EXPECT_LE(err(o), 5e-3) << "q's values of fold " << seed - 52;
    }
  }
  unsetenv("OOMB_CUDNN_MIN_QUERIES");
  // by default a call of fewer than 128 queries is not cuDNN's: pinned to cuDNN, it is an error naming why
  Pair q(DType::F32, {5, 2, 8}), o(DType::F32, {5, 2, 8}), lse(DType::F32, {5, 2}), k(DType::F32, {5, 1, 8});
  AttnArgs a{0.35f, 0};
  a.bf16 = true;
  const std::vector<KVBlock> own{{k.d, k.d, Tensor(), Tensor(), 0}};
  try {
    backends().cudnn->attention_fwd(q.d, own, a, o.d, lse.d);
    ADD_FAILURE() << "5 queries went to cuDNN";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than OOMB_CUDNN_MIN_QUERIES"), std::string::npos) << e.what();
  }
#ifdef OOMB_SIMT
  // cuDNN asking more workspace than cudnn_attention_workspace planned: the route refuses (said on
  // stderr), so pinned to cuDNN the call is an error; auto runs it on the mma kernels, still right
  setenv("OOMB_SIMT_CUDNN_WORKSPACE", "1000000000", 1);
  setenv("OOMB_CUDNN_MIN_QUERIES", "1", 1);
  const AttnCase big{17, 4, 2, 16, {16, 16}, false, DType::F32};
  EXPECT_THROW(attention_case(big, true, cuda_backend_with_attention("cudnn").get(), false), std::exception)
      << "a workspace over the plan was used";
  attention_case(big, true, cuda_backend_with_attention("auto").get(), false);
  unsetenv("OOMB_CUDNN_MIN_QUERIES");
  unsetenv("OOMB_SIMT_CUDNN_WORKSPACE");
#endif
}
