// --offload kv on the simulated device: K/V and gradient pages in pinned host memory, streamed
// through the device in groups, give the loss and every gradient bit for bit of the run with every
// page resident, over N, C, page sizes, group sizes, kv dtypes and --doc-mask, with and without a
// copy delay; skipping one of the offload's waits (with the delay) breaks that equality. Also: the
// asynchronous primitives of the simulated device, and one attention forward fewer per layer.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <atomic>
#include <cstring>
#include <numeric>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "backend/sim_hold.h"
#include "hf/checkpoint.h"
#include "model/kept_attention_offload.h"
#include "model/sweep_plan.h"
#include "train/model.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

struct StepResult {
  double loss;
  int64_t correct;
  std::vector<float> grads;
};

// One training step (and an evaluation, whose loss must equal the step's); then three more steps,
// which must allocate nothing and give the same loss and gradients bit for bit (their pages come
// from pools earlier steps left holding their values, in another order: nothing may read those
// as sums).
StepResult run(Backend& be, const std::filesystem::path& dir, const std::vector<int32_t>& ids,
               const std::vector<int32_t>& tg, int64_t N, const ChunkPlan& plan, bool check = true) {
  const ModelConfig cfg = load_config(dir);
  Model m(cfg, be, plan);
  load_for_training(m, dir);
  const LossStats ls = m.forward_backward(ids.data(), tg.data(), N, 1.0f);
  if (!check) return {ls.loss_sum, ls.correct, host_grads(m)};  // deliberately broken: its first step only
  const LossStats ev = m.evaluate(ids.data(), tg.data(), N);
  // the same per-chunk losses, summed in the other chunk order
  EXPECT_NEAR(ev.loss_sum, ls.loss_sum, 1e-12 * ls.loss_sum) << "evaluation and training disagree";
  const int64_t allocated = Accountant::global().allocations();
  const std::vector<float> first = host_grads(m);
  for (int step = 1; step < 4; ++step) {
    be.zero(m.grads().flat());
    const LossStats again = m.forward_backward(ids.data(), tg.data(), N, 1.0f);
    EXPECT_EQ(Accountant::global().allocations(), allocated) << "a steady-state step allocated";
    EXPECT_EQ(again.loss_sum, ls.loss_sum);
    const std::vector<float> g = host_grads(m);
    EXPECT_TRUE(std::memcmp(first.data(), g.data(), first.size() * 4) == 0)
        << "step " << step << "'s gradients differ from the first's: rel. error " << rel_error(g, first);
  }
  EXPECT_EQ(m.kv().pages_in_use(), 0);
  EXPECT_EQ(m.kv_grad().pages_in_use(), 0);
  return {ls.loss_sum, ls.correct, host_grads(m)};
}

bool same_bits(const StepResult& a, const StepResult& b) {
  return std::memcmp(&a.loss, &b.loss, sizeof a.loss) == 0 && a.correct == b.correct &&
         a.grads.size() == b.grads.size() && std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4) == 0;
}

// Token ids with separators (id 3) now and then, so --doc-mask has documents to keep apart.
std::vector<int32_t> tokens(int64_t n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t x = seed;
  for (auto& v : t) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    v = int32_t((x >> 33) % 61);
  }
  return t;
}

struct Case {
  int64_t N, C, P, group;
  DType kv, grad;
  bool docs;
};

std::string name(const Case& c) {
  return fmt::format("N={} C={} P={} group={} kv {} kv_grad {}{}", c.N, c.C, c.P, c.group, dtype_name(c.kv),
                     dtype_name(c.grad), c.docs ? " doc-mask" : "");
}

ChunkPlan plan_of(const Case& c, bool offload) {
  ChunkPlan p{c.C, c.P, c.grad, c.docs ? 3 : -1};
  p.kv_dtype = c.kv;
  p.offload_kv = offload;
  p.offload_group = c.group;
  return p;
}

// A Mistral of two layers whose attention slides over 21 tokens, in a directory of its own.
std::filesystem::path windowed_model() {
  const auto dir = temp_dir();
  nlohmann::json j = tiny_config_json("mistral", 2);
  j["sliding_window"] = 21;
  write_tiny_model(dir, j, 8);
  return dir;
}

class Offload : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(temp_dir("_offload"));
    write_tiny_model(*dir_, tiny_config_json("qwen2", 2), 5);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::filesystem::path* dir_;
  void TearDown() override { KVCache::drop_wait_for_test(nullptr); }

  // resident on the simulated device against offloaded, same backend kind
  // (out_delay_us: the copies out's delay, if not delay_us)
  void expect_bitwise(const Case& c, int64_t delay_us, const std::filesystem::path* model = nullptr,
                      int64_t out_delay_us = -1) {
    const std::filesystem::path& dir = model ? *model : *dir_;
    SCOPED_TRACE(name(c) + fmt::format(" delay {} us, out {} us", delay_us, out_delay_us));
    const auto t = tokens(c.N + 1, uint64_t(c.N * 31 + c.C));
    const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
    auto cpu = make_cpu_backend();
    const StepResult ref = run(*cpu, dir, ids, tg, c.N, plan_of(c, false));
    auto sim = make_sim_backend(0, delay_us, out_delay_us);
    const StepResult resident = run(*sim, dir, ids, tg, c.N, plan_of(c, false));
    const StepResult offloaded = run(*sim, dir, ids, tg, c.N, plan_of(c, true));
    EXPECT_TRUE(same_bits(ref, resident)) << "the simulated device differs from the CPU";
    EXPECT_TRUE(same_bits(ref, offloaded)) << "offload changed the result: loss " << offloaded.loss << " vs "
                                           << ref.loss << ", gradient rel. error "
                                           << rel_error(offloaded.grads, ref.grads);
  }
};
std::filesystem::path* Offload::dir_ = nullptr;

TEST_F(Offload, BitwiseIdenticalToResidentPages) {
  const DType F = DType::F32, B = DType::BF16;
  const Case cases[] = {
      {37, 13, 16, 1, F, F, false},  {37, 37, 16, 2, F, F, false},  {97, 13, 16, 2, F, F, false},
      {97, 32, 16, 3, F, F, false},  {97, 29, 7, 2, F, F, false},   {131, 32, 16, 1, F, F, false},
      {131, 13, 16, 4, B, F, false}, {131, 32, 16, 2, F, B, false}, {131, 32, 16, 2, B, B, false},
      {97, 13, 16, 2, F, F, true},   {131, 29, 7, 3, B, B, true},   {64, 16, 16, 4, F, F, false},
      {256, 64, 128, 0, F, F, false}, {256, 96, 64, 0, F, F, false},
  };
  for (const Case& c : cases) expect_bitwise(c, 0);
}

// Sliding windows: only the pages a chunk's window reaches stream through the device.
TEST_F(Offload, SlidingWindowBitwiseIdentical) {
  const auto dir = windowed_model();
  const DType F = DType::F32;
  for (const Case& c : {Case{97, 13, 4, 2, F, F, false}, Case{131, 32, 16, 1, F, F, true}}) expect_bitwise(c, 0, &dir);
  expect_bitwise(Case{97, 13, 4, 3, F, F, false}, 300, &dir);
}

TEST_F(Offload, BitwiseIdenticalWithACopyDelay) {
  const DType F = DType::F32, B = DType::BF16;
  for (const Case& c : {Case{97, 13, 16, 2, F, F, true}, Case{131, 32, 16, 3, B, B, false}}) {
    expect_bitwise(c, 300);
    expect_bitwise(c, 50, nullptr, 3000);  // the copies out lagging far behind those in
  }
}

// With every copy held until something waits for it (kHoldCopies), each of the offload's waits
// matters, whatever the machine's load: without it attention reads a
// group before it has arrived, a chunk's K/V staging is overwritten before it went out (four
// layers: the first chunk reuses a staging buffer with no group wait between), or the chunk's own
// gradients are read before they came in; with the copies out held, a group's pages come in
// before what went home has landed ('gone').
TEST_F(Offload, DroppingAWaitBreaksIt) {
  const auto dir = temp_dir();
  nlohmann::json j = tiny_config_json("qwen2", 2);
  j["num_hidden_layers"] = 4;
  write_tiny_model(dir, j, 6);
  const Case c{97, 13, 16, 2, DType::F32, DType::F32, false};
  const auto t = tokens(c.N + 1, 7);
  const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
  auto sim = make_sim_backend(0, 300), held = make_sim_backend(0, kHoldCopies);
  const StepResult ref = run(*sim, dir, ids, tg, c.N, plan_of(c, false));
  ASSERT_TRUE(same_bits(ref, run(*sim, dir, ids, tg, c.N, plan_of(c, true))));
  ASSERT_TRUE(same_bits(ref, run(*held, dir, ids, tg, c.N, plan_of(c, true)))) << "every copy held until waited for";
  for (const char* wait : {"in", "write", "own"}) {
    SCOPED_TRACE(wait);
    KVCache::drop_wait_for_test(wait);
    const StepResult broken = run(*held, dir, ids, tg, c.N, plan_of(c, true), false);
    KVCache::drop_wait_for_test(nullptr);
    EXPECT_FALSE(same_bits(ref, broken)) << "the test does not notice a missing '" << wait << "' wait";
  }
  auto lagging = make_sim_backend(0, 50, kHoldCopies);
  ASSERT_TRUE(same_bits(ref, run(*lagging, dir, ids, tg, c.N, plan_of(c, true))));
  KVCache::drop_wait_for_test("gone");
  const StepResult broken = run(*lagging, dir, ids, tg, c.N, plan_of(c, true), false);
  KVCache::drop_wait_for_test(nullptr);
  EXPECT_FALSE(same_bits(ref, broken)) << "the test does not notice a missing 'gone' wait";
}

// --keep-attention gives the bits of recomputing attention (loss, every gradient, the steady
// state's steps, evaluation), on the CPU and the simulated device (with a copy delay), pages
// resident or offloaded, fp32 and bf16, both sweep orders, documents, sliding windows, sparse pages.
TEST_F(Offload, KeepingAttentionGivesTheSameBits) {
  const auto window = windowed_model();
  const DType F = DType::F32, B = DType::BF16;
  struct Keep {
    Case c;
    bool offload, bf16, layer, sparse, windowed;
  };
  const Keep cases[] = {
      {{97, 13, 16, 2, F, F, false}, false, false, false, false, false},
      {{97, 13, 16, 2, F, F, true}, true, false, false, false, false},
      {{131, 32, 16, 3, B, B, false}, true, true, false, false, false},
      {{97, 29, 7, 2, F, F, true}, false, false, true, false, false},
      {{131, 32, 16, 2, F, F, false}, true, true, true, false, false},
      {{97, 13, 4, 2, F, F, false}, true, false, false, false, true},
      {{131, 32, 16, 0, F, F, false}, false, false, false, true, false},
  };
  for (const Keep& k : cases) {
    SCOPED_TRACE(name(k.c) + fmt::format(" offload {} bf16 {} layer {} sparse {} window {}", k.offload, k.bf16, k.layer,
                                         k.sparse, k.windowed));
    const auto t = tokens(k.c.N + 1, uint64_t(k.c.N * 7 + k.c.C));
    const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
    ChunkPlan plan = plan_of(k.c, k.offload);
    plan.precision = k.bf16 ? B : F;
    plan.sweep = k.layer ? SweepOrder::Layer : SweepOrder::Chunk;
    if (k.sparse) plan.sparse.pages = 2, plan.sparse.tile = 16;
    const std::filesystem::path& dir = k.windowed ? window : *dir_;
    auto sim = make_sim_backend(0, 200);
    auto cpu = make_cpu_backend();
    for (Backend* be : {sim.get(), k.offload ? nullptr : cpu.get()}) {
      if (!be) continue;
      const StepResult recomputed = run(*be, dir, ids, tg, k.c.N, plan);
      ChunkPlan keep = plan;
      keep.keep_attention = k.c.N + 5;  // (planned for a longer sequence: this one's rows are the first)
      const StepResult kept = run(*be, dir, ids, tg, k.c.N, keep);
      EXPECT_TRUE(same_bits(recomputed, kept)) << be->name() << ": loss " << kept.loss << " vs " << recomputed.loss
                                               << ", gradient rel. error " << rel_error(kept.grads, recomputed.grads);
    }
  }
}

// What keeping costs: every (tier, tag) peak equals the plan, and the device's activations grow by
// exactly every layer's (N, H, D) output (fp32, or bf16 under --precision bf16, whose outputs hold
// bf16 values) and (N, H) LSE (fp32), less the chunk buffers the layers work in without it (with it
// they work in the store's rows): every layer's (C, H, D) and (C, H) in the chunk order (its output
// bf16 under --precision bf16), one layer's (fp32) in the layer order.
TEST_F(Offload, KeepingAttentionCostsWhatThePlanSays) {
  const ModelConfig cfg = load_config(*dir_);
  const int64_t N = 256, C = 64, H = cfg.heads, D = cfg.head_dim, L = cfg.layers;
  Accountant& acc = Accountant::global();
  for (const DType precision : {DType::F32, DType::BF16})
  for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer}) {
    int64_t activations[2] = {0, 0};
    for (const bool keep : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {} order keep={}", dtype_name(precision), sweep_name(order), keep));
      ChunkPlan plan{C, 16};
      plan.sweep = order;
      plan.precision = precision;
      plan.keep_attention = keep ? N : 0;
      acc.reset_peaks();
      const MemoryPlan pred = train_for_peaks(cfg, plan, N, true, 2);
      for (Tier tier : kTiers)
        for (int i = 0; i < kNumTags; ++i) {
          if (Tag(i) == Tag::IO) continue;
          EXPECT_EQ(acc.get(tier, Tag(i)).peak, pred.get(tier, Tag(i))) << tier_name(tier) << " " << tag_name(Tag(i));
        }
      activations[keep] = acc.get(Tier::Device, Tag::Activations).peak;
    }
    const bool bf16 = precision == DType::BF16, chunk_order = order == SweepOrder::Chunk;
    const int64_t o_bytes = bf16 ? 2 : 4, chunk_o_bytes = bf16 && chunk_order ? 2 : 4;
    const int64_t buffers = (chunk_order ? L : 1) * C * H * (D * chunk_o_bytes + 4);
    EXPECT_EQ(activations[1] - activations[0], L * N * H * (D * o_bytes + 4) - buffers) << sweep_name(order);
  }
}

// --offload attention: the kept outputs in pinned host memory, each chunk's rows through two sets
// of device slots, give the bits of the store on the device (loss, every gradient, the steady
// state's steps, evaluation), fp32 and bf16, pages resident or offloaded, documents, sliding windows,
// sparse pages, one chunk or many, with a copy delay each way and with every copy held until
// something waits for it.
TEST_F(Offload, OffloadedKeptAttentionGivesTheSameBits) {
  const auto window = windowed_model();
  const DType F = DType::F32, B = DType::BF16;
  struct Keep {
    Case c;
    bool offload_kv, bf16, sparse, windowed;
    int64_t delay_in, delay_out;
  };
  const Keep cases[] = {
      {{97, 13, 16, 2, F, F, false}, false, false, false, false, 200, -1},
      {{97, 13, 16, 2, F, F, true}, true, false, false, false, 50, 3000},
      {{131, 32, 16, 3, B, B, false}, true, true, false, false, kHoldCopies, -1},
      {{131, 32, 16, 2, F, F, false}, false, true, false, false, 0, kHoldCopies},
      {{97, 13, 4, 2, F, F, false}, true, false, false, true, 300, -1},
      {{131, 32, 16, 0, F, F, false}, false, false, true, false, 200, -1},
      {{40, 40, 16, 0, F, F, false}, false, true, false, false, 200, -1},  // one chunk
      {{64, 32, 16, 0, F, F, false}, false, false, false, false, 200, -1},  // two: no slot set used twice
  };
  for (const Keep& k : cases) {
    SCOPED_TRACE(name(k.c) + fmt::format(" offload kv {} bf16 {} sparse {} window {} delays {} {}", k.offload_kv,
                                         k.bf16, k.sparse, k.windowed, k.delay_in, k.delay_out));
    const auto t = tokens(k.c.N + 1, uint64_t(k.c.N * 5 + k.c.C));
    const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
    ChunkPlan keep = plan_of(k.c, k.offload_kv);
    keep.precision = k.bf16 ? B : F;
    if (k.sparse) keep.sparse.pages = 2, keep.sparse.tile = 16;
    keep.keep_attention = k.c.N + 5;  // (planned for a longer sequence: this one's rows are the first)
    const std::filesystem::path& dir = k.windowed ? window : *dir_;
    auto sim = make_sim_backend(0, k.delay_in, k.delay_out);
    const StepResult on_device = run(*sim, dir, ids, tg, k.c.N, keep);
    ChunkPlan home = keep;
    home.offload_attention = true;
    const StepResult offloaded = run(*sim, dir, ids, tg, k.c.N, home);
    EXPECT_TRUE(same_bits(on_device, offloaded)) << "loss " << offloaded.loss << " vs " << on_device.loss
                                                 << ", gradient rel. error "
                                                 << rel_error(offloaded.grads, on_device.grads);
  }
}

// With every copy held until something waits for it, each of --offload attention's waits the model
// needs matters: without "in" the backward reads a set before its rows came in; without "write" the
// forward sweep's third chunk overwrites the first's rows before they went home (the copies out
// held). (The fetch's "gone" wait: in the model's order the compute stream has waited for every row
// the backward fetches to go home, so KeptAttentionSlotsGiveBackEveryChunkInAnyOrder shows it in
// another order.)
TEST_F(Offload, DroppingAKeptAttentionWaitBreaksIt) {
  const Case c{97, 13, 16, 2, DType::F32, DType::F32, false};
  const auto t = tokens(c.N + 1, 11);
  const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
  ChunkPlan keep = plan_of(c, false);
  keep.keep_attention = c.N;
  ChunkPlan home = keep;
  home.offload_attention = true;
  auto sim = make_sim_backend(0, 300);
  const StepResult ref = run(*sim, *dir_, ids, tg, c.N, keep);
  for (const auto& [wait, in, out] : {std::tuple{"in", kHoldCopies, int64_t(-1)}, {"write", int64_t(0), kHoldCopies}}) {
    SCOPED_TRACE(wait);
    auto held = make_sim_backend(0, in, out);
    ASSERT_TRUE(same_bits(ref, run(*held, *dir_, ids, tg, c.N, home))) << "with every wait";
    KeptAttentionOffload::drop_wait_for_test(wait);
    auto held2 = make_sim_backend(0, in, out);
    const StepResult broken = run(*held2, *dir_, ids, tg, c.N, home, false);
    KeptAttentionOffload::drop_wait_for_test(nullptr);
    EXPECT_FALSE(same_bits(ref, broken)) << "the test does not notice a missing '" << wait << "' wait";
  }
}

// What offloading the kept outputs costs: every (tier, tag) peak equals the plan; the device's
// activations are those of the store on the device less the store plus two chunks' rows of it, the
// pinned activations the store; the bytes moved a step are kept_attention_traffic's: every row out,
// and in all but the last two chunks'.
TEST_F(Offload, OffloadedKeptAttentionCostsWhatThePlanSays) {
  const ModelConfig cfg = load_config(*dir_);
  const int64_t N = 256, C = 64, H = cfg.heads, D = cfg.head_dim, L = cfg.layers;
  Accountant& acc = Accountant::global();
  for (const DType precision : {DType::F32, DType::BF16}) {
    int64_t device[2] = {0, 0}, pinned[2] = {0, 0};
    for (const bool home : {false, true}) {
      SCOPED_TRACE(fmt::format("{} offloaded={}", dtype_name(precision), home));
      ChunkPlan plan{C, 16};
      plan.precision = precision;
      plan.keep_attention = N;
      plan.offload_attention = home;
      acc.reset_peaks();
      const MemoryPlan pred = train_for_peaks(cfg, plan, N, true, 2);
      expect_peaks_equal(pred);
      device[home] = acc.get(Tier::Device, Tag::Activations).peak;
      pinned[home] = acc.get(Tier::Pinned, Tag::Activations).peak;
    }
    const int64_t o_bytes = precision == DType::BF16 ? 2 : 4, row = L * H * (D * o_bytes + 4);
    EXPECT_EQ(device[0] - device[1], (N - 2 * C) * row) << dtype_name(precision);
    EXPECT_EQ(pinned[1] - pinned[0], N * row) << dtype_name(precision);
  }
  // the traffic of three steps
  auto sim = make_sim_backend();
  ChunkPlan plan{C, 16};
  plan.keep_attention = N;
  plan.offload_attention = true;
  Model m(cfg, *sim, plan);
  load_for_training(m, *dir_);
  const auto t = tokens(N + 1, 5);
  for (int step = 0; step < 3; ++step) m.forward_backward(t.data(), t.data() + 1, N, 1.0f);
  const KeptAttentionOffload::Traffic& tr = m.kept_attention_offload()->traffic();
  EXPECT_EQ(tr.in + tr.out, 3 * kept_attention_traffic(cfg, plan, N));
  // every row out; in, all but the last two chunks' (the backward finds them in their slots)
  const int64_t row = L * H * (D * 4 + 4);
  EXPECT_EQ(tr.out, 3 * N * row);
  EXPECT_EQ(tr.in, 3 * (N - 2 * C) * row);
}

// KeptAttentionOffload by itself, over two sequences (100 tokens, 7 chunks, the short one first,
// then 96 tokens, 6: the last chunk in the other set) of other values: after a forward pass writes
// every chunk's rows, a pass reading the chunks in any order (the model's reverse, forward, shuffled,
// the reverse again) finds every chunk's rows as that sequence's forward wrote them, with every copy
// in or out held until something waits for it. The reverse pass fetches all but the last two chunks
// (the forward left those in their slots). In the forward order the first fetch overwrites the set
// holding the last chunk's rows while their way home is still held (nothing on the compute stream
// waits for it): without the fetch's "gone" wait the rows that reach home are the first fetched
// chunk's, and reading the last chunk back gives those.
TEST_F(Offload, KeptAttentionSlotsGiveBackEveryChunkInAnyOrder) {
  const int64_t C = 16, H = 3, D = 4, row = 2 * H * (D + 1) * 4;  // (two arrays' o and LSE, fp32)
  for (const auto& [in, out, dropped] : {std::tuple{kHoldCopies, int64_t(-1), ""}, {int64_t(0), kHoldCopies, ""},
                                         {int64_t(50), kHoldCopies, ""}, {int64_t(50), kHoldCopies, "gone"}}) {
    SCOPED_TRACE(fmt::format("delays {} {}, dropped '{}'", in, out, dropped));
    auto sim = make_sim_backend(0, in, out);
    Arena home(Tier::Pinned, Tag::Activations, 4 * Arena::need(DType::F32, {100, H, D}));
    Arena host(Tier::Pinned, Tag::IO, 2 * Arena::need(DType::F32, {C, H, D}));
    std::vector<Tensor> o, lse;
    for (int a = 0; a < 2; ++a) {
      o.push_back(home.take(DType::F32, {100, H, D}));
      lse.push_back(home.take(DType::F32, {100, H}));
    }
    Tensor given = host.take(DType::F32, {C, H, D}), got = host.take(DType::F32, {C, H, D});
    KeptAttentionOffload kept(*sim, o, lse, C);
    KeptAttentionOffload::drop_wait_for_test(*dropped ? dropped : nullptr);
    int64_t wrong = 0;
    for (const int64_t N : {int64_t(100), int64_t(96)}) {
      const int64_t T = chunk_count(N, C);
      // the value of array a's element i of token t, o or LSE, in this sequence
      auto value = [N](int a, bool is_lse, int64_t t, int64_t i) {
        return float(N * 10000 + a * 5000 + is_lse * 2500 + t * 20 + i);
      };
      std::vector<int64_t> up(static_cast<size_t>(T), 0), down;
      std::iota(up.begin(), up.end(), int64_t(0));
      down.assign(up.rbegin(), up.rend());
      const std::vector<int64_t> shuffled = T == 7 ? std::vector<int64_t>{3, 6, 0, 5, 1, 4, 2}
                                                   : std::vector<int64_t>{3, 0, 5, 1, 4, 2};
      kept.begin_pass(N, up, true);
      for (int64_t t = 0; t < T; ++t) {  // each slot's rows from `given`, filled once the stream is done with it
        const ChunkSpan c = chunk_span(N, C, t);
        for (int a = 0; a < 2; ++a)
          for (const bool is_lse : {false, true}) {
            const Tensor slot = is_lse ? kept.lse(size_t(a), c) : kept.o(size_t(a), c);
            const int64_t w = slot.numel() / c.size();
            sim->synchronize();
            float* g = static_cast<float*>(given.data);
            for (int64_t i = 0; i < slot.numel(); ++i) g[i] = value(a, is_lse, c.begin + i / w, i % w);
            sim->copy_async(slot.data, slot.tier, given.data, given.tier, slot.bytes(), Stream::Compute);
          }
        kept.next();
      }
      const KeptAttentionOffload::Traffic before = kept.traffic();
      const std::vector<int64_t>* orders[] = {&down, &up, &shuffled, &down};
      for (size_t k = 0; k < 4; ++k) {
        if (*dropped && k != 1) continue;  // (the forward order alone: the reverse needs no "gone")
        kept.begin_pass(N, *orders[k], false);
        for (const int64_t t : *orders[k]) {
          const ChunkSpan c = chunk_span(N, C, t);
          for (int a = 0; a < 2; ++a)
            for (const bool is_lse : {false, true}) {
              const Tensor slot = is_lse ? kept.lse(size_t(a), c) : kept.o(size_t(a), c);
              sim->copy_async(got.data, got.tier, slot.data, slot.tier, slot.bytes(), Stream::Compute);
              sim->synchronize();
              const float* g = static_cast<const float*>(got.data);
              const int64_t w = slot.numel() / c.size();
              for (int64_t i = 0; i < slot.numel(); ++i) wrong += g[i] != value(a, is_lse, c.begin + i / w, i % w);
            }
          kept.next();
        }
        if (k == 0) {
          EXPECT_EQ(kept.traffic().in - before.in, (N - 2 * C) * row) << N;  // not the last two chunks'
        }
      }
      if (!*dropped) {
        EXPECT_EQ(wrong, 0) << N;
      }
    }
    KeptAttentionOffload::drop_wait_for_test(nullptr);
    EXPECT_EQ(kept.traffic().out, 196 * row);  // every row of both sequences went home once
    if (*dropped) {
      EXPECT_GT(wrong, 0) << "the test does not notice a missing '" << dropped << "' wait";
    }
  }
}

// --offload attention without --keep-attention, in the layer order, or without a device is refused,
// naming the flags.
TEST_F(Offload, OffloadingKeptAttentionRefusesWhatItCannotTake) {
  const ModelConfig cfg = load_config(*dir_);
  auto cpu = make_cpu_backend();
  auto sim = make_sim_backend();
  ChunkPlan p{32, 16};
  p.offload_attention = true;
  EXPECT_EQ(error_of([&] { Model m(cfg, *sim, p); }),
            "--offload attention: only with --keep-attention (it moves the kept attention outputs into pinned host "
            "memory)");
  p.keep_attention = 64;
  EXPECT_EQ(error_of([&] { Model m(cfg, *cpu, p); }),
            "--offload attention: the backend has no device memory to offload from (use --device sim or cuda)");
  p.sweep = SweepOrder::Layer;
  EXPECT_EQ(error_of([&] { Model m(cfg, *sim, p); }),
            "--offload attention: only in the chunk order (--sweep chunk); the layer order keeps its attention "
            "outputs on the device");
}

// A sequence longer than the model keeps attention for is refused, naming the flag; evaluating
// one is not (evaluation keeps nothing).
TEST_F(Offload, KeepingAttentionRefusesALongerSequence) {
  auto cpu = make_cpu_backend();
  const ModelConfig cfg = load_config(*dir_);
  ChunkPlan p{16, 16};
  p.keep_attention = 40;
  Model m(cfg, *cpu, p);
  load_for_training(m, *dir_);
  const auto t = tokens(42, 3);
  EXPECT_EQ(error_of([&] { m.forward_backward(t.data(), t.data() + 1, 41, 1.0f); }),
            "--keep-attention: the model keeps attention outputs for sequences of up to 40 tokens (its --seq-len), "
            "got 41");
  EXPECT_GT(m.evaluate(t.data(), t.data() + 1, 41).targets, 0);
  EXPECT_GT(m.forward_backward(t.data(), t.data() + 1, 40, 1.0f).targets, 0);
}

TEST_F(Offload, BadInputIsNamed) {
  auto cpu = make_cpu_backend();
  const ModelConfig cfg = load_config(*dir_);
  ChunkPlan p{32, 16};
  p.offload_kv = true;
  EXPECT_EQ(error_of([&] { Model m(cfg, *cpu, p); }),
            "--offload kv: the cpu backend has no device memory to offload from (use --device sim or cuda)");
  // a device too small: the allocation that does not fit names the tier, the tag and the flag
  auto sim = make_sim_backend(4096, 0);
  EXPECT_NE(error_of([&] { Model m(cfg, *sim, p); }).find("device memory: "), std::string::npos);
  EXPECT_NE(error_of([&] { Model m(cfg, *sim, p); }).find("exceeds --device-memory 4096"), std::string::npos);
}

// The simulated device's copy engine: a copy is not there until its event is waited for (held:
// kHoldCopies), and work on the copy stream runs in order.
TEST(SimDevice, CopiesArriveAtTheirEventInOrder) {
  auto sim = make_sim_backend(0, kHoldCopies);
  Buffer host(Tier::Pinned, Tag::IO, 4096), dev(Tier::Device, Tag::IO, 4096);
  std::memset(host.data(), 7, 4096);
  auto e = sim->new_event();
  sim->copy_async(dev.data(), Tier::Device, host.data(), Tier::Pinned, 4096, Stream::Copy);
  sim->fill_zero_async(dev.as<char>() + 1024, 1024, Stream::Copy);
  sim->record(*e, Stream::Copy);
  EXPECT_EQ(dev.as<char>()[0], 0) << "the copy landed before anything waited for it";
  sim->wait(Stream::Compute, *e);
  EXPECT_EQ(dev.as<char>()[0], 7);
  EXPECT_EQ(dev.as<char>()[1024], 0);  // the fill ran after the copy
  EXPECT_EQ(dev.as<char>()[2048], 7);
}

// The two copy streams run beside each other, each in order: a copy in waits for an event of the
// copy-out stream (a copy back held until something waits for it) before it overwrites what that
// copy reads, and the host's wait for the copy in covers both; without the wait the copy in
// overtakes it (the control).
TEST(SimDevice, ACopyStreamWaitsForTheOthersEvent) {
  for (const bool wait : {true, false}) {
    SCOPED_TRACE(wait ? "waiting" : "not waiting");
    auto sim = make_sim_backend(0, 0, kHoldCopies);  // the copies out held
    Buffer host(Tier::Pinned, Tag::IO, 4096), dev(Tier::Device, Tag::IO, 4096), back(Tier::Pinned, Tag::IO, 4096);
    std::memset(host.data(), 7, 4096);
    std::memset(dev.data(), 3, 4096);
    auto out = sim->new_event(), in = sim->new_event();
    sim->copy_async(back.data(), Tier::Pinned, dev.data(), Tier::Device, 4096, Stream::CopyOut);
    sim->record(*out, Stream::CopyOut);
    if (wait) sim->wait(Stream::Copy, *out);
    sim->copy_async(dev.data(), Tier::Device, host.data(), Tier::Pinned, 4096, Stream::Copy);
    sim->record(*in, Stream::Copy);
    sim->synchronize(*in);
    EXPECT_EQ(dev.as<char>()[0], 7);
    if (wait) {
      EXPECT_EQ(back.as<char>()[0], 3) << "the copy back read what the copy in wrote";
    }
    sim->synchronize();
    EXPECT_EQ(back.as<char>()[4095], wait ? 3 : 7) << (wait ? "" : "control: the copy in did not overtake the copy back");
  }
  {  // OOMB_COPY_STREAMS=1: one queue for both, in issue order without the wait
    const ScopedEnv one("OOMB_COPY_STREAMS", "1");
    auto sim = make_sim_backend(0, 0, kHoldCopies);  // (two queues: the copy back held behind the copy in)
    Buffer host(Tier::Pinned, Tag::IO, 64), dev(Tier::Device, Tag::IO, 64), back(Tier::Pinned, Tag::IO, 64);
    std::memset(host.data(), 7, 64);
    std::memset(dev.data(), 3, 64);
    sim->copy_async(back.data(), Tier::Pinned, dev.data(), Tier::Device, 64, Stream::CopyOut);
    sim->copy_async(dev.data(), Tier::Device, host.data(), Tier::Pinned, 64, Stream::Copy);
    sim->synchronize();
    EXPECT_EQ(back.as<char>()[0], 3);
  }
  const ScopedEnv bad("OOMB_COPY_STREAMS", "3");
  EXPECT_EQ(error_of([] { make_sim_backend(); }), "OOMB_COPY_STREAMS: 1 or 2, got '3'");
}

// Each layer's attention runs twice per chunk in a training step (the forward sweep and the
// recompute sweep; the forward sweep's last layer needs no attention): the per-layer recompute
// before a layer's backward reuses the recompute sweep's output and LSE.
class CountingBackend final : public CpuBackend {
 public:
  int64_t passes = 0, calls = 0;

 protected:
  void do_attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                        Tensor& lse) override {
    passes += a.first;
    ++calls;
    CpuBackend::do_attention_fwd(q, blocks, a, o, lse);
  }
};

TEST(AttentionPasses, TwoPerLayerAndChunkInAStep) {
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("llama", 2), 3);
  const auto t = tokens(98, 9);
  for (auto [N, C] : {std::pair<int64_t, int64_t>{97, 13}, {97, 97}, {64, 32}}) {
    SCOPED_TRACE(fmt::format("N={} C={}", N, C));
    CountingBackend be;
    Model m(cfg, be, ChunkPlan{C, 16});
    load_weights(dir, cfg, m.params());
    m.enable_grads();
    m.forward_backward(t.data(), t.data() + 1, N, 1.0f);
    const int64_t T = (N + C - 1) / C, L = cfg.layers;
    EXPECT_EQ(be.passes, T * (L - 1) + T * L);  // was T * (L - 1) + 2 * T * L before O and LSE were kept
    EXPECT_EQ(be.calls, be.passes) << "resident pages are one group: one call per pass";
  }
}

// --keep-attention: each layer's attention output and LSE stay from the forward sweep, so the
// backward's recompute attends to nothing: one attention forward per layer and chunk, in either order
// (the layer order recomputes each layer, attention included, before its backward otherwise: 2 T L).
TEST(AttentionPasses, OnePerLayerAndChunkKeepingThem) {
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("llama", 2), 3);
  const auto t = tokens(98, 9);
  for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer})
    for (auto [N, C] : {std::pair<int64_t, int64_t>{97, 13}, {64, 32}})
      for (const bool keep : {false, true}) {
        SCOPED_TRACE(fmt::format("N={} C={} {} order keep={}", N, C, sweep_name(order), keep));
        CountingBackend be;
        ChunkPlan plan{C, 16};
        plan.sweep = order;
        plan.keep_attention = keep ? N : 0;
        Model m(cfg, be, plan);
        load_weights(dir, cfg, m.params());
        m.enable_grads();
        m.forward_backward(t.data(), t.data() + 1, N, 1.0f);
        const int64_t T = (N + C - 1) / C, L = cfg.layers;
        EXPECT_EQ(be.passes, keep ? T * L : order == SweepOrder::Layer ? 2 * T * L : T * (L - 1) + T * L);
      }
}

}  // namespace
