// The K/V and gradient pages an offloaded cache (--offload kv) copies in a training step
// (KVCache::traffic) against the planner (kv/kv_traffic, model/sweep_plan), for the chunk and the
// layer order: equal with dense attention (short first chunk, pages cut by chunks, a sliding
// window, bf16 pages, one layer; a second sequence moves the same), and the other order's count
// differs. With sparse attention the plan is an upper bound; the measured bytes are the same in
// both orders and equal a count made here from the recorded choices of pages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <functional>
#include <set>
#include <tuple>

#include "kv/kv_traffic.h"
#include "model/init.h"
#include "model/sweep_plan.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

ModelConfig config(int64_t layers, bool window) {
  nlohmann::json j = tiny_config_json("qwen2", 2);
  j["num_hidden_layers"] = layers;
  if (window) {  // layers from the second on see 10 tokens back
    j["use_sliding_window"] = true;
    j["sliding_window"] = 10;
    j["max_window_layers"] = 1;
  }
  return parse_config(j, "kv traffic test config");
}

ChunkPlan plan_of(SweepOrder order, int64_t C, int64_t P) {
  ChunkPlan p{C, P};
  p.offload_kv = true;
  p.offload_group = 2;
  p.sweep = order;
  return p;
}

// The cache's traffic over `seqs` sequences of N tokens (one model, its counters from zero).
KVTraffic measure(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, int64_t seqs,
                  const std::function<void(const Model&)>& after = {}) {
  auto sim = make_sim_backend();
  Model m(cfg, *sim, plan);
  init_params(m.params(), 5);
  m.enable_grads();
  for (int64_t s = 0; s < seqs; ++s) {
    const auto t = step_tokens(N + 1, uint64_t(s + 3), cfg.vocab);
    const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
    m.forward_backward(ids.data(), tg.data(), N, 1.0f);
  }
  if (after) after(m);
  return m.kv_cache().traffic();
}

std::string show(const KVTraffic& t) {
  return fmt::format("kv in {} out {}, grads in {} out {}", t.kv_in, t.kv_out, t.grads_in, t.grads_out);
}

void expect_times(const KVTraffic& got, const KVTraffic& plan, int64_t k) {
  EXPECT_EQ(got.kv_in, k * plan.kv_in);
  EXPECT_EQ(got.kv_out, k * plan.kv_out);
  EXPECT_EQ(got.grads_in, k * plan.grads_in);
  EXPECT_EQ(got.grads_out, k * plan.grads_out);
}

TEST(KVTraffic, PlanEqualsMeasuredDense) {
  struct Case {
    const char* name;
    int64_t layers, N, C, P;
    bool window, bf16;
  };
  for (const Case& k : {Case{"2 layers", 2, 37, 13, 8, false, false}, Case{"1 layer", 1, 37, 13, 8, false, false},
                        Case{"3 layers, window 10", 3, 61, 13, 4, true, false},
                        Case{"2 layers, bf16 pages", 2, 40, 8, 8, false, true}}) {
    const ModelConfig cfg = config(k.layers, k.window);
    KVTraffic got[2], want[2];
    for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer}) {
      SCOPED_TRACE(fmt::format("{}, N {}, C {}, P {}, {} order", k.name, k.N, k.C, k.P, sweep_name(order)));
      ChunkPlan plan = plan_of(order, k.C, k.P);
      if (k.bf16) plan.kv_dtype = plan.kv_grad_dtype = DType::BF16;
      const int i = order == SweepOrder::Layer;
      const KVTrafficPlan p = plan_kv_traffic(kv_cache_options(cfg, plan), plan.sparse, k.N, k.C, i == 1);
      EXPECT_TRUE(p.exact);
      want[i] = p.bytes;
      got[i] = measure(cfg, plan, k.N, 2);
      expect_times(got[i], want[i], 2);
      // the sweep plan carries the same figures into --sweep auto's totals
      const SweepTraffic s = kv_order_traffic(cfg, plan, k.N, order);
      EXPECT_EQ(s.kv, want[i].kv());
      EXPECT_EQ(s.kv_grads, want[i].grads());
      std::cout << fmt::format("[ kv pages ] {}, N {}, C {}, P {}, {} order, per sequence: {}\n", k.name, k.N, k.C,
                               k.P, sweep_name(order), show(want[i]));
    }
    // negative control: the orders differ by the last layer's forward reads, which each count sees
    EXPECT_NE(got[0].kv_in, 2 * want[1].kv_in) << k.name;
    EXPECT_NE(got[1].kv_in, 2 * want[0].kv_in) << k.name;
    EXPECT_EQ(got[0].grads(), got[1].grads()) << k.name << ": the backward reads the same pages in both orders";
  }
}

// --keep-attention: the recompute reads no pages, and every layer's forward does: two prefix reads
// per layer and chunk in either order, the plan equal to the measured bytes.
TEST(KVTraffic, PlanEqualsMeasuredKeepingAttention) {
  for (const bool window : {false, true}) {
    const ModelConfig cfg = config(3, window);
    KVTraffic got[2];
    for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer}) {
      SCOPED_TRACE(fmt::format("window {}, {} order", window, sweep_name(order)));
      ChunkPlan plan = plan_of(order, 13, 8);
      plan.keep_attention = 61;
      const KVTrafficPlan p = plan_kv_traffic(kv_cache_options(cfg, plan), plan.sparse, 61, 13, order == SweepOrder::Layer, true);
      const int i = order == SweepOrder::Layer;
      got[i] = measure(cfg, plan, 61, 2);
      expect_times(got[i], p.bytes, 2);
      EXPECT_EQ(kv_order_traffic(cfg, plan, 61, order).kv, p.bytes.kv());
      // against recomputing: less read (the recompute's reads), the gradients' the same
      const KVTraffic recompute = plan_kv_traffic(kv_cache_options(cfg, plan), plan.sparse, 61, 13, i == 1).bytes;
      EXPECT_LT(p.bytes.kv_in, recompute.kv_in);
      EXPECT_EQ(p.bytes.grads(), recompute.grads());
    }
    EXPECT_EQ(got[0].kv_in, got[1].kv_in) << "keeping, both orders read every layer's prefix twice";
  }
}

// Full attention is counted in closed form; a window wider than the sequence takes the chunk by
// chunk count of sliding windows, which must give the same bytes. Absurd sizes are refused, naming
// --seq-len, instead of overflowing or counting for hours.
TEST(KVTraffic, ClosedFormEqualsTheCountByChunk) {
  const ModelConfig cfg = config(3, false);
  for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer})
    for (const auto& [N, C, P] : {std::tuple{37, 13, 8}, {4096, 512, 128}, {1000, 1000, 16}, {999, 100, 7}}) {
      SCOPED_TRACE(fmt::format("N {} C {} P {} {}", N, C, P, sweep_name(order)));
      KVCacheOptions o = kv_cache_options(cfg, plan_of(order, C, P)), wide = o;
      wide.windows.assign(3, 1 << 30);
      const bool layer = order == SweepOrder::Layer;
      const KVTraffic a = plan_kv_traffic(o, {}, N, C, layer).bytes, b = plan_kv_traffic(wide, {}, N, C, layer).bytes;
      EXPECT_EQ(show(a), show(b));
      wide.windows.assign(3, 64);  // negative control: a window that chunks reach past reads less
      if (N > C + 64) {
        EXPECT_LT(plan_kv_traffic(wide, {}, N, C, layer).bytes.kv_in, a.kv_in);
      }
    }
  const KVCacheOptions o = kv_cache_options(cfg, plan_of(SweepOrder::Chunk, 1024, 128));
  EXPECT_THAT(error_of([&] { plan_kv_traffic(o, {}, int64_t(1) << 40, 1024, false); }),
              ::testing::HasSubstr("--seq-len 1099511627776: the K/V pages' traffic of a step would be more than 2^62"));
  KVCacheOptions w = o;
  w.windows.assign(3, 4096);
  EXPECT_THAT(error_of([&] { plan_kv_traffic(w, {}, int64_t(1) << 40, 1024, false); }),
              ::testing::HasSubstr("--seq-len 1099511627776 in chunks of 1024"));
}

// Layer order: parameters and pages offloaded together, the sweep plan's totals against every
// store's measured bytes.
TEST(KVTraffic, SweepPlanTotalsEqualEveryStoresBytes) {
  const ModelConfig cfg = config(3, false);  // (three layers: the chunk order finds layer 1 in its slot again)
  const int64_t N = 37, C = 13;
  for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer}) {
    SCOPED_TRACE(sweep_name(order));
    ChunkPlan plan = plan_of(order, C, 8);
    plan.offload_params = true;
    const SweepChoice s = sweep_traffic(cfg, plan, N);
    const SweepTraffic& want = order == SweepOrder::Layer ? s.layer : s.chunk;
    int64_t got = 0;
    measure(cfg, plan, N, 1, [&](const Model& m) {
      const ParamStore::Traffic& p = m.store().traffic();
      got = p.weights_in + p.grads_in + p.grads_out + m.kv_cache().traffic().kv() + m.kv_cache().traffic().grads();
      if (m.activations()) got += m.activations()->traffic().in + m.activations()->traffic().out;
    });
    EXPECT_EQ(got, want.total());
    EXPECT_GT(want.kv, 0);
  }
}

// Sparse attention: the bytes a step moves, counted from the selector's record. Per layer and
// chunk: the tiles' choices (the union over kv head groups, with each page's groups) merged into
// runs of consecutive equal tiles; every run's pages stream in three times (forward, recompute,
// backward: every layer attends), rows = the page's tokens before the chunk; in the backward,
// chunks from the last, the chunk's own rows come in where a gradient page exists, each run's
// gradient pages come in where they exist (else they are created) and all go out; the pages from
// the chunk's first whole page on are then freed.
KVTraffic from_record(const Model& m, const ChunkPlan& plan, int64_t N) {
  const SparseSelector& sel = *m.sparse();
  const KVCacheOptions o = kv_cache_options(m.config(), plan);
  const int64_t C = plan.chunk, P = plan.page_size, T = (N + C - 1) / C, L = m.config().layers;
  const int64_t sets = plan.sparse.sets(m.config().kv_heads), tile = plan.sparse.tile;
  const int64_t kv_row = 2 * int64_t(o.kv.row_bytes()), grad_row = 2 * int64_t(o.grad.row_bytes());
  auto begin_of = [&](int64_t t) { return std::max<int64_t>(0, N - (T - t) * C); };
  auto runs = [&](int64_t l, int64_t b, int64_t n) {
    std::vector<std::vector<std::pair<int64_t, uint64_t>>> out;  // per run: (page, groups)
    if (b == 0) return out;
    for (int64_t i = 0; i * tile < n; ++i) {
      std::vector<std::pair<int64_t, uint64_t>> pages;
      for (int64_t s = 0; s < sets; ++s)
        for (const int64_t p : sel.recorded(l, b, i, s)) {
          auto it = std::find_if(pages.begin(), pages.end(), [&](auto& e) { return e.first == p; });
          if (it == pages.end()) pages.push_back({p, 0}), it = pages.end() - 1;
          it->second |= sets == 1 ? ~uint64_t(0) : uint64_t(1) << s;
        }
      std::sort(pages.begin(), pages.end());
      if (out.empty() || out.back() != pages) out.push_back(pages);
    }
    return out;
  };
  KVTraffic t;
  t.kv_out = L * N * kv_row;
  std::vector<std::set<int64_t>> exists(static_cast<size_t>(L));
  for (int64_t c = T - 1; c >= 0; --c) {
    const int64_t b = begin_of(c), e = N - (T - 1 - c) * C;
    for (int64_t l = L - 1; l >= 0; --l) {
      std::set<int64_t>& ex = exists[size_t(l)];
      for (int64_t p = b / P; p * P < e; ++p)  // own rows
        if (ex.count(p)) t.grads_in += (std::min(e, (p + 1) * P) - std::max(b, p * P)) * grad_row;
      for (const auto& run : runs(l, b, e - b))
        for (const auto& [p, groups] : run) {
          const int64_t rows = std::min(P, b - p * P);
          t.kv_in += 3 * rows * kv_row;
          if (!ex.insert(p).second) t.grads_in += rows * grad_row;
          t.grads_out += rows * grad_row;
        }
      ex.erase(ex.lower_bound((b + P - 1) / P), ex.end());
    }
  }
  return t;
}

TEST(KVTraffic, SparseIsBoundedAndCountedFromTheRecord) {
  const ModelConfig cfg = config(2, false);
  const int64_t N = 61, C = 13, P = 4;
  for (const bool shared : {false, true})
    for (const int64_t K : {1, 2, 16}) {  // K = 16 covers every earlier page: dense reads, exact
      KVTraffic got[2];
      for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer}) {
        SCOPED_TRACE(fmt::format("K {}, {}, {} order", K, shared ? "shared" : "per group", sweep_name(order)));
        ChunkPlan plan = plan_of(order, C, P);
        plan.sparse = sparse_options(K, 4, 1, shared, "mean", C, cfg.kv_heads);
        const int i = order == SweepOrder::Layer;
        KVTraffic record;
        got[i] = measure(cfg, plan, N, 1, [&](const Model& m) { record = from_record(m, plan, N); });
        EXPECT_EQ(show(got[i]), show(record));
        const KVTrafficPlan p = plan_kv_traffic(kv_cache_options(cfg, plan), plan.sparse, N, C, i == 1);
        EXPECT_EQ(p.exact, K == 16);
        if (p.exact) expect_times(got[i], p.bytes, 1);
        EXPECT_LE(got[i].kv_in, p.bytes.kv_in);
        EXPECT_EQ(got[i].kv_out, p.bytes.kv_out);
        EXPECT_LE(got[i].grads_in, p.bytes.grads_in);
        EXPECT_LE(got[i].grads_out, p.bytes.grads_out);
        std::cout << fmt::format("[ sparse   ] K {}, {}, {} order: measured {}; planned {}{}\n", K,
                                 shared ? "shared" : "per group", sweep_name(order), show(got[i]),
                                 p.exact ? "" : "at most ", show(p.bytes));
      }
      EXPECT_EQ(show(got[0]), show(got[1])) << "both orders read the recorded runs";
    }
}

// Negative control of the count from the record: dense attention's pages (every earlier page,
// one run) put in place of the record gives more bytes than a sparse step moved.
TEST(KVTraffic, SparseMovesLessThanDense) {
  const ModelConfig cfg = config(2, false);
  const int64_t N = 61, C = 13, P = 4;
  ChunkPlan dense = plan_of(SweepOrder::Chunk, C, P), sparse = dense;
  sparse.sparse = sparse_options(1, 4, 1, true, "mean", C, cfg.kv_heads);
  dense.sparse = sparse_options(16, 4, 1, true, "mean", C, cfg.kv_heads);
  EXPECT_LT(measure(cfg, sparse, N, 1).kv_in, measure(cfg, dense, N, 1).kv_in);
}

}  // namespace
