// --sweep layer (train/layer_sweep.cpp) against the chunk order: every step's loss and gradients,
// the final weights and AdamW moments bit for bit, over several steps of AdamW and SGD with two
// sequences accumulated per step, on the CPU and on the simulated device with a copy delay, with
// parameters resident, --offload params and kv,params, --doc-mask, bf16 pages, --precision bf16
// (resident and offloaded), sparse attention,
// sliding windows, a tied embedding and a one-layer model. Skipping the activation store's wait,
// or adding a tied head's gradient in the loss pass (as a plain layer order would), breaks it. The
// bytes the stores copy equal the planner's counts; the device's memory does not depend on depth
// at all, one layer's gradient pages exist at once, and the plan equals every (tier, tag) peak.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cstdlib>
#include <map>

#include "backend/sim_hold.h"
#include "model/init.h"
#include "model/sweep_plan.h"
#include "train/model.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

ChunkPlan plan_of(SweepOrder sweep, bool kv, bool params) {
  ChunkPlan p{13, 8};
  p.offload_kv = kv;
  p.offload_group = kv ? 2 : 0;
  p.offload_params = params;
  p.sweep = sweep;
  return p;
}

class Sweep : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new std::vector<std::filesystem::path>;
    const std::filesystem::path root = temp_dir("_sweep");
    // untied with biases (2 layers), tied (3 layers), Qwen3's q/k norms (1 layer), Qwen2 with
    // a sliding window on its second layer (gradient pages differ by layer), and a vocabulary of
    // three lm_head tiles (offloaded, they stream through the store's tile slots); a Granite (its
    // multipliers: the embedding's scaled in layer 0's pass, the logits' in the loss pass); a SmolLM3
    // whose first layer turns no q or k
    nlohmann::json qwen2 = tiny_config_json("qwen2", 2), llama = tiny_config_json("llama", 1),
                   qwen3 = tiny_config_json("qwen3", 2), window = tiny_config_json("qwen2", 2),
                   wide = tiny_config_json("qwen2", 2);
    wide["vocab_size"] = 20000;
    llama["num_hidden_layers"] = 3;
    llama["tie_word_embeddings"] = true;
    qwen3["num_hidden_layers"] = 1;
    window["use_sliding_window"] = true;
    window["sliding_window"] = 16;
    window["max_window_layers"] = 1;
    nlohmann::json smollm3 = tiny_config_json("smollm3", 2);  // (its first layer NoPE)
    smollm3["no_rope_layers"] = {0, 1};
    int seed = 21;
    for (auto& [name, j] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"qwen2", qwen2}, {"llama-tied", llama}, {"qwen3", qwen3}, {"qwen2-window", window},
             {"qwen2-wide", wide}, {"granite", tiny_granite_json(2)}, {"smollm3-nope", smollm3},
             {"olmo2", tiny_config_json("olmo2", 2)}, {"gemma3", tiny_gemma3_json(2)},
             {"glm4", tiny_config_json("glm4", 2)}}) {
      models_->push_back(root / name);
      write_tiny_model(models_->back(), j, uint64_t(seed++));
    }
  }
  static void TearDownTestSuite() { delete models_; }
  void TearDown() override {
    ActivationStore::drop_wait_for_test(nullptr);
    Model::layer_sweep_fault_for_test(nullptr);
  }
  static std::vector<std::filesystem::path>* models_;
};
std::vector<std::filesystem::path>* Sweep::models_ = nullptr;

const int64_t kN = 37;  // chunks of 13: 11, 13, 13

TEST_F(Sweep, LayerOrderIsBitwiseTheChunkOrder) {
  int compared = 0;
  for (const auto& dir : *models_)
    for (const std::string opt : {"adamw", "sgd"}) {
      {  // the CPU: the arrays are the backend's own memory
        auto cpu = make_cpu_backend();
        SCOPED_TRACE(fmt::format("{} {} cpu", dir.filename().string(), opt));
        const Trained ref = train_steps(*cpu, dir, plan_of(SweepOrder::Chunk, false, false), opt, kN, 3, 2);
        EXPECT_EQ(difference(ref, train_steps(*cpu, dir, plan_of(SweepOrder::Layer, false, false), opt, kN, 3, 2)), "");
        ++compared;
      }
      auto sim = make_sim_backend(0, 200);
      const Trained ref = train_steps(*sim, dir, plan_of(SweepOrder::Chunk, false, false), opt, kN, 3, 2);
      for (const auto& [kv, params] : {std::pair{false, false}, {false, true}, {true, true}}) {
        SCOPED_TRACE(fmt::format("{} {} sim, delay 200 us, offload{}{}", dir.filename().string(), opt,
                                 kv ? " kv" : "", params ? " params" : ""));
        EXPECT_EQ(difference(ref, train_steps(*sim, dir, plan_of(SweepOrder::Layer, kv, params), opt, kN, 3, 2)), "");
        ++compared;
      }
    }
  std::cout << fmt::format("[ sweep    ] {} layer-order runs of 3 steps x 2 sequences equal the chunk order bit for bit\n",
                           compared);
}

// Documents (their ids read back by every layer), bf16 K/V and gradient pages, C = N, and
// --precision bf16 with parameters resident (variant 3) and offloaded (4: the slots hold the
// layers' bf16 images).
TEST_F(Sweep, LayerOrderIsBitwiseTheChunkOrderWithDocumentsAndBf16) {
  for (const auto& dir : *models_) {
    auto sim = make_sim_backend(0, 100);
    for (const int variant : {0, 1, 2, 3, 4}) {
      SCOPED_TRACE(fmt::format("{} variant {}", dir.filename().string(), variant));
      ChunkPlan chunk = plan_of(SweepOrder::Chunk, true, variant != 3),
                layer = plan_of(SweepOrder::Layer, true, variant != 3);
      for (ChunkPlan* p : {&chunk, &layer}) {
        if (variant == 0) p->doc_sep = 3;
        if (variant == 1) p->kv_dtype = p->kv_grad_dtype = DType::BF16;
        if (variant == 2) p->chunk = kN, p->offload_group = 0;
        if (variant >= 3) p->precision = DType::BF16;
      }
      EXPECT_EQ(difference(train_steps(*sim, dir, chunk, "adamw", kN, 2, 2), train_steps(*sim, dir, layer, "adamw", kN, 2, 2)), "");
    }
  }
}

// Page-sparse attention (mean and quest scores): each layer's choice depends only on its own earlier
// chunks' pages, so the layer order chooses what the chunk order chooses.
TEST_F(Sweep, LayerOrderIsBitwiseTheChunkOrderWithSparseAttention) {
  for (const auto& dir : *models_) {
    const ModelConfig cfg = load_config(dir);
    auto sim = make_sim_backend(0, 100);
    for (const bool kv : {false, true})
      for (const std::string score : {"mean", "quest"}) {
        SCOPED_TRACE(fmt::format("{} offload kv {}, score {}", dir.filename().string(), kv, score));
        ChunkPlan chunk = plan_of(SweepOrder::Chunk, kv, true), layer = plan_of(SweepOrder::Layer, kv, true);
        chunk.page_size = layer.page_size = 4;
        chunk.sparse = layer.sparse = sparse_options(2, 4, 1, false, score, 13, cfg.kv_heads);
        EXPECT_EQ(difference(train_steps(*sim, dir, chunk, "adamw", kN, 2, 2),
                             train_steps(*sim, dir, layer, "adamw", kN, 2, 2)), "");
      }
  }
}

// A model planned for the layer order evaluates and gives logits through the chunk order, with its
// fewer device buffers: the chunk-order model's bits.
TEST_F(Sweep, EvaluationOfALayerOrderModelIsTheChunkOrders) {
  for (const auto& dir : *models_) {
    SCOPED_TRACE(dir.filename().string());
    auto sim = make_sim_backend();
    const ModelConfig cfg = load_config(dir);
    const auto t = step_tokens(kN + 1, 7, cfg.vocab);
    const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
    double loss[2];
    std::vector<float> logits[2];
    for (int i = 0; i < 2; ++i) {
      Model m(cfg, *sim, plan_of(i ? SweepOrder::Layer : SweepOrder::Chunk, true, true));
      load_for_training(m, dir);
      loss[i] = m.evaluate(ids.data(), tg.data(), kN).loss_sum;
      logits[i].resize(size_t(kN * cfg.vocab));
      m.logits(ids.data(), kN, logits[i].data());
    }
    EXPECT_EQ(loss[0], loss[1]);
    EXPECT_TRUE(logits[0] == logits[1]);
  }
}

// With every copy held until something waits for it, skipping the wait for a chunk's layer input
// gives another result, and so does skipping a fetch's wait for the outputs sent out with the copies
// out held ('gone'), however loaded the machine; so does
// adding a tied embedding's lm_head part in the loss pass instead of beside its embedding part.
TEST_F(Sweep, SkippingTheWaitOrAddingTheTiedHeadEarlyBreaksIt) {
  {
    auto sim = make_sim_backend(0, 2000), held = make_sim_backend(0, kHoldCopies),
         lagging = make_sim_backend(0, 100, kHoldCopies);
    const auto& dir = models_->front();
    const Trained ref = train_steps(*sim, dir, plan_of(SweepOrder::Chunk, false, true), "adamw", kN, 2, 1);
    for (Backend* be : {lagging.get(), held.get()})
      EXPECT_EQ(difference(ref, train_steps(*be, dir, plan_of(SweepOrder::Layer, false, true), "adamw", kN, 2, 1)), "");
    for (const char* wait : {"in", "gone"}) {
      ActivationStore::drop_wait_for_test(wait);
      const bool in = std::string(wait) == "in";
      const std::string diff =
          difference(ref, train_steps(in ? *held : *lagging, dir, plan_of(SweepOrder::Layer, false, true), "adamw", kN, 2, 1));
      ActivationStore::drop_wait_for_test(nullptr);
      EXPECT_NE(diff, "") << "without the '" << wait << "' wait the result is still the same";
      std::cout << fmt::format("[ sweep    ] without the activation store's '{}' wait: {}\n", wait, diff);
    }
  }
  auto cpu = make_cpu_backend();
  const auto& tied = (*models_)[1];
  ASSERT_TRUE(load_config(tied).tie_word_embeddings);
  const Trained ref = train_steps(*cpu, tied, plan_of(SweepOrder::Chunk, false, false), "sgd", kN, 1, 1);
  Model::layer_sweep_fault_for_test("tied-head");
  const std::string diff = difference(ref, train_steps(*cpu, tied, plan_of(SweepOrder::Layer, false, false), "sgd", kN, 1, 1));
  Model::layer_sweep_fault_for_test(nullptr);
  EXPECT_NE(diff, "") << "the tied head's gradient added in the loss pass still gives the chunk order's bits";
  std::cout << fmt::format("[ sweep    ] the tied lm_head's gradient added in the loss pass: {}\n", diff);
}

// The bytes each store copies equal the planner's count for the layer order (1, 2, 4 and 5 layers,
// untied and tied; 3 chunks, 2 sequences a step, 2 steps; and 4 layers with a vocabulary of three
// lm_head tiles, which stream twice per chunk, four times tied: layer 0 computes each chunk's
// lm_head part again), and the layer order moves fewer than the chunk order at these shapes but
// the tied three-tile one (the lm_head's second streaming outweighs 4 layers' savings: --sweep
// auto takes the chunk order there).
// With --precision bf16 the weights cross as the layers' images and the head's bf16 lm_head.
TEST(SweepTraffic, PlannerCountsTheBytesMoved) {
  for (const bool bf16 : {false, true})
  for (const bool tied : {false, true})
    for (const int64_t L : {1, 2, 4, 5, -4}) {  // -4: 4 layers, 3 lm_head tiles
      const std::string what = fmt::format("{} layers{}{}{}", std::abs(L), tied ? " tied" : "", bf16 ? " bf16" : "",
                                           L < 0 ? " (3 lm_head tiles)" : "");
      SCOPED_TRACE(what);
      nlohmann::json j = tiny_config_json("qwen2", 2);
      j["num_hidden_layers"] = std::abs(L);
      j["tie_word_embeddings"] = tied;
      if (L < 0) j["vocab_size"] = 20000;
      const ModelConfig cfg = parse_config(j, "traffic test config");
      auto sim = make_sim_backend();
      ChunkPlan plan = plan_of(SweepOrder::Layer, false, true);
      plan.precision = bf16 ? DType::BF16 : DType::F32;
      Model m(cfg, *sim, plan);
      init_params(m.params(), 3);
      m.enable_grads();
      const int64_t steps = 2, accum = 2;
      for (int64_t k = 0; k < steps; ++k) {
        m.zero_grads();
        for (int64_t micro = 0; micro < accum; ++micro) {
          const auto t = step_tokens(kN + 1, uint64_t(k * accum + micro), cfg.vocab);
          const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
          m.forward_backward(ids.data(), tg.data(), kN, 0.5f);
        }
      }
      const ParamStore::Traffic& got = m.store().traffic();
      const ActivationStore::Traffic& acts = m.activations()->traffic();
      const SweepTraffic want = layer_order_traffic(cfg, kN, 13, accum, tied, bf16);
      EXPECT_EQ(want.host_bytes, ActivationStore::host_bytes(cfg, std::abs(L) + tied, kN));
      EXPECT_EQ(got.weights_in, steps * want.weights);
      EXPECT_EQ(got.grads_in + got.grads_out, steps * want.grads);
      EXPECT_EQ(acts.in + acts.out, steps * want.activations);
      const SweepTraffic chunk = chunk_order_traffic(cfg, kN, 13, accum, bf16);
      if (L < 0 && tied) {
        EXPECT_GT(want.total(), chunk.total());
      } else {
        EXPECT_LT(want.total(), chunk.total());
      }
      std::cout << fmt::format("[ traffic  ] {}, N = {}, C = 13, 2 sequences: layer order {} B a step "
                               "(weights {}, grads {}, activations {}), chunk order {} B\n",
                               what, kN, want.total(), want.weights, want.grads, want.activations, chunk.total());
    }
}

// Models of 2, 4, 8 and 16 layers (same width, same N) with --offload kv,params --sweep layer:
// every device tag, activations included, peaks at the same bytes; the host arrays are L x N x d
// floats; one layer's gradient pages exist at once (the chunk order holds every layer's); a second
// sequence allocates nothing; the plan equals every (tier, tag) peak.
TEST(SweepMemory, DeviceMemoryIndependentOfDepth) {
  const int64_t N = 256, C = 64, P = 16;
  Accountant& acc = Accountant::global();
  std::map<std::string, int64_t> first;
  for (const int64_t L : {2, 4, 8, 16}) {
    SCOPED_TRACE(fmt::format("{} layers", L));
    nlohmann::json j = tiny_config_json("llama", 1);
    j["num_hidden_layers"] = L;
    const ModelConfig cfg = parse_config(j, "depth test config");
    ChunkPlan plan{C, P};
    plan.offload_kv = plan.offload_params = true;
    plan.offload_group = 2;
    plan.sweep = SweepOrder::Layer;
    acc.reset_peaks();
    MemoryPlan pred;
    int64_t second_allocs = -1;
    {
      auto be = make_sim_backend();
      Model m(cfg, *be, plan);
      init_params(m.params(), 1);
      m.enable_grads();
      for (int64_t seq = 0; seq < 2; ++seq) {
        const auto t = step_tokens(N + 1, uint64_t(seq), cfg.vocab);
        const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
        const int64_t before = acc.allocations();
        m.forward_backward(ids.data(), tg.data(), N, 1.0f);
        if (seq == 1) second_allocs = acc.allocations() - before;
      }
      pred = plan_memory(cfg, plan, N, "sgd", be->workspace_bytes(workspace_shape(cfg, C)), Tier::Device);
    }
    EXPECT_EQ(second_allocs, 0) << "a second sequence allocated";
    std::map<std::string, int64_t> device;
    for (Tier tier : kTiers)
      for (int i = 0; i < kNumTags; ++i) {
        if (Tag(i) == Tag::IO || Tag(i) == Tag::Optimizer) continue;
        const int64_t peak = acc.get(tier, Tag(i)).peak;
        EXPECT_EQ(peak, pred.get(tier, Tag(i))) << tier_name(tier) << " " << tag_name(Tag(i)) << ": plan";
        if (tier == Tier::Device) device[std::string(tag_name(Tag(i)))] = peak;
      }
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::Activations).peak, L * N * cfg.hidden * 4);
    const KVShape g{L, cfg.kv_heads, cfg.head_dim, P, DType::F32};
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::KVGrad).peak, g.pages_for(N - C) * g.page_bytes()) << "one layer's pages";
    std::cout << fmt::format("[ memory   ] {:>2} layers: device {:>8} B (activations {} B), pinned activations {:>8} B, "
                             "kv_grad {} B\n",
                             L, pred.total(Tier::Device), acc.get(Tier::Device, Tag::Activations).peak,
                             acc.get(Tier::Pinned, Tag::Activations).peak, acc.get(Tier::Pinned, Tag::KVGrad).peak);
    if (first.empty()) first = device;
    EXPECT_EQ(device, first) << "a device tag grew with depth";
  }
}

}  // namespace
