// --offload params on the simulated device: master weights and gradients in pinned host memory,
// AdamW moments in host memory, every layer streamed through two device slots (the host CPU updating them) give
// the losses, gradients, updated weights and moments bit for bit of the run with everything on
// the device, over several steps of AdamW and SGD with gradient accumulation and clipping, with
// and without --offload kv and an injected copy delay; skipping one of the store's waits breaks
// that. The device's memory does not grow with depth (2..16 layers) but for each layer's saved
// activations, and the plan equals every (tier, tag) peak. A plan that does not fit the host is
// refused naming the tag and the bytes. (The host update's loops: test_host_update.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "backend/sim_hold.h"
#include "cli/guards.h"
#include "data/repeat_task.h"
#include "model/bf16_weights.h"
#include "model/init.h"
#include "model/lora.h"
#include "model/sweep_plan.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "train/trainer.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// A vocabulary of 20000: three lm_head tiles (lm_head_vocab_tile: 6720, 6720, 6560 rows).
nlohmann::json wide_vocab(nlohmann::json j) {
  j["vocab_size"] = 20000;
  return j;
}

ChunkPlan plan_of(bool kv, bool params) {
  ChunkPlan p{13, 8};
  p.offload_kv = kv;
  p.offload_group = kv ? 2 : 0;
  p.offload_params = params;
  return p;
}

class OffloadParams : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new std::vector<std::filesystem::path>;
    const std::filesystem::path root = temp_dir("_offload_params");
    // untied with biases (2 layers), tied (3 layers: the slots' parity moves between passes),
    // Phi-3 with a pad token (its embedding row untouched by the lookup's gradient, on the host too),
    // Qwen3's q/k norms (1 layer: a pass of one); a vocabulary of three lm_head tiles, untied (the
    // tiles stream through their slots) and tied (tiles of the embedding, which stays); a Granite
    // (its multipliers on the host's embedding lookup and the streamed head); a SmolLM3 with a NoPE layer
    nlohmann::json qwen2 = tiny_config_json("qwen2", 2), llama = tiny_config_json("llama", 1),
                   qwen3 = tiny_config_json("qwen3", 2), wide = wide_vocab(tiny_config_json("qwen2", 2)),
                   wide_tied = wide_vocab(tiny_config_json("llama", 1));
    llama["num_hidden_layers"] = 3;
    llama["tie_word_embeddings"] = true;
    qwen3["num_hidden_layers"] = 1;
    wide_tied["tie_word_embeddings"] = true;
    // Phi-3 (fused tensors in the file) with a pad token, whose row of the host's embedding takes no gradient
    nlohmann::json phi3 = tiny_config_json("llama", 2);
    phi3["architectures"] = {"Phi3ForCausalLM"}, phi3["model_type"] = "phi3", phi3["pad_token_id"] = 5;
    nlohmann::json smollm3 = tiny_config_json("smollm3", 2);  // (its second layer NoPE)
    smollm3["no_rope_layers"] = {1, 0};
    int seed = 11;
    for (auto& [name, j] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"qwen2", qwen2}, {"llama-tied", llama}, {"qwen3", qwen3}, {"qwen2-wide", wide},
             {"llama-tied-wide", wide_tied}, {"phi3-pad", phi3}, {"granite", tiny_granite_json(2)},
             {"smollm3-nope", smollm3}, {"olmo2", tiny_config_json("olmo2", 2)}, {"gemma3", tiny_gemma3_json(2)},
             {"glm4", tiny_config_json("glm4", 2)}}) {
      models_->push_back(root / name);
      write_tiny_model(models_->back(), j, uint64_t(seed++));
    }
  }
  static void TearDownTestSuite() { delete models_; }
  void TearDown() override {
    ParamStore::drop_wait_for_test(nullptr);
    Optimizer::delay_update_for_test(0);
    Optimizer::hold_update_for_test(false);
  }
  static std::vector<std::filesystem::path>* models_;
};
std::vector<std::filesystem::path>* OffloadParams::models_ = nullptr;

TEST_F(OffloadParams, BitwiseIdenticalToResidentParameters) {
  const int64_t N = 37;  // chunks of 13: 11, 13, 13
  int compared = 0;
  for (const auto& dir : *models_)
    for (const std::string opt : {"adamw", "sgd"})
      for (const auto& [delay, out_delay] :
           {std::pair<int64_t, int64_t>{0, 0}, {200, 200}, {20, 2000}, {kHoldCopies, kHoldCopies}}) {
        if ((out_delay != delay || delay == kHoldCopies) && opt != "adamw") continue;  // (lagging, held: AdamW alone)
        auto sim = make_sim_backend(0, delay, out_delay);
        const Trained ref = train_steps(*sim, dir, plan_of(false, false), opt, N, 3, 2);
        for (const bool kv : {false, true}) {
          const auto us = [](int64_t d) { return d == kHoldCopies ? std::string("held") : fmt::format("{} us", d); };
          SCOPED_TRACE(fmt::format("{} {} delay {} (out {}), --offload {}", dir.filename().string(), opt, us(delay),
                                   us(out_delay), kv ? "kv,params" : "params"));
          const Trained off = train_steps(*sim, dir, plan_of(kv, true), opt, N, 3, 2);
          EXPECT_EQ(difference(ref, off), "");
          ++compared;
        }
      }
  std::cout << fmt::format("[ offload  ] {} offloaded runs of 3 steps x 2 sequences equal the resident run bit for bit\n",
                           compared);
}

// --precision bf16 with --offload params: the slots hold each layer's image (bf16 matrices, fp32
// norms and biases) cast on the host from the fp32 masters, which stay there. 3 AdamW steps of 2
// accumulated sequences give the losses, gradients, weights and moments bit for bit of the resident
// bf16 run on the simulated device (with a copy delay; also --offload kv,params), which equals the
// CPU's; the fp32 offloaded run differs from it (the control), and so does a bf16 run that skips
// the wait for a layer's arrival.
TEST_F(OffloadParams, Bf16BitwiseIdenticalToResidentParameters) {
  const int64_t N = 37;
  int compared = 0;
  for (const auto& dir : *models_) {
    auto bf16 = [](ChunkPlan p) {
      p.precision = DType::BF16;
      return p;
    };
    auto cpu = make_cpu_backend();
    auto sim = make_sim_backend(0, 200);
    const Trained on_cpu = train_steps(*cpu, dir, bf16(plan_of(false, false)), "adamw", N, 3, 2);
    const Trained ref = train_steps(*sim, dir, bf16(plan_of(false, false)), "adamw", N, 3, 2);
    EXPECT_EQ(difference(on_cpu, ref), "") << dir.filename() << ": the simulated device against the CPU";
    for (const bool kv : {false, true}) {
      SCOPED_TRACE(fmt::format("{} --offload {} --precision bf16", dir.filename().string(), kv ? "kv,params" : "params"));
      EXPECT_EQ(difference(ref, train_steps(*sim, dir, bf16(plan_of(kv, true)), "adamw", N, 3, 2)), "");
      ++compared;
    }
    const std::string fp32 = difference(ref, train_steps(*sim, dir, plan_of(false, true), "adamw", N, 3, 2));
    EXPECT_NE(fp32, "") << "control: fp32 offloaded parameters give bf16's bits";
    if (dir == models_->front()) {
      auto held = make_sim_backend(0, kHoldCopies);
      EXPECT_EQ(difference(ref, train_steps(*held, dir, bf16(plan_of(false, true)), "adamw", N, 3, 2)), "") << "held";
      ParamStore::drop_wait_for_test("in");
      const std::string early = difference(ref, train_steps(*held, dir, bf16(plan_of(false, true)), "adamw", N, 3, 2));
      ParamStore::drop_wait_for_test(nullptr);
      EXPECT_NE(early, "") << "without the 'in' wait the bf16 images still arrive in time";
      std::cout << fmt::format("[ offload  ] bf16: fp32 offloaded against bf16 resident: {}; without the 'in' wait: {}\n",
                               fp32, early);
    }
  }
  std::cout << fmt::format("[ offload  ] {} bf16 offloaded runs of 3 AdamW steps x 2 sequences equal the resident bf16 "
                           "run (and the CPU's) bit for bit\n", compared);
}

// Evaluation, every position's logits and incremental decoding of the 3-tile models (untied, and
// tied: the tiles are the host embedding's rows) with the lm_head streamed in tiles (--offload
// kv,params, a copy delay) give the resident run's loss and logits bit for bit; skipping the wait
// for a tile's arrival does not (the control).
TEST_F(OffloadParams, EvaluationLogitsAndDecodingStreamTheTiles) {
  for (const size_t model : {size_t(3), size_t(4)}) {
  const auto& dir = (*models_)[model];
  const ModelConfig cfg = load_config(dir);
  SCOPED_TRACE(cfg.tie_word_embeddings ? "tied" : "untied");
  ASSERT_TRUE(ParamStore::streams_head(cfg, false));
  const int64_t N = 37, V = cfg.vocab;
  const auto t = step_tokens(N + 1, 5, V);
  const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
  struct Out {
    double loss;
    std::vector<float> logits, decoded;
  };
  auto run = [&](bool offload, int64_t delay) {
    auto sim = make_sim_backend(0, delay);
    Model m(cfg, *sim, plan_of(offload, offload));
    load_for_training(m, dir);
    Out o;
    o.loss = m.evaluate(ids.data(), tg.data(), N).loss_sum;
    o.logits.resize(size_t(N * V));
    m.logits(ids.data(), N, o.logits.data());
    m.begin_decode(N);
    o.decoded.resize(size_t(3 * V));
    m.decode(ids.data(), 13, o.decoded.data());  // a prompt of one chunk, then one token at a time
    m.decode(ids.data() + 13, 1, o.decoded.data() + V);
    m.decode(ids.data() + 14, 1, o.decoded.data() + 2 * V);
    return o;
  };
  const Out res = run(false, 0), off = run(true, 200);
  EXPECT_EQ(std::memcmp(&res.loss, &off.loss, sizeof res.loss), 0) << res.loss << " vs " << off.loss;
  EXPECT_TRUE(same(res.logits, off.logits)) << "logits, rel. error " << rel_error(res.logits, off.logits);
  EXPECT_TRUE(same(res.decoded, off.decoded)) << "decoded logits, rel. error " << rel_error(res.decoded, off.decoded);
  const Out held = run(true, kHoldCopies);
  EXPECT_TRUE(same(res.logits, held.logits) && same(res.decoded, held.decoded)) << "held, with every wait";
  ParamStore::drop_wait_for_test("head-in");
  const Out early = run(true, kHoldCopies);
  ParamStore::drop_wait_for_test(nullptr);
  EXPECT_FALSE(same(res.logits, early.logits)) << "control: without the 'head-in' wait the logits are the same";
  std::cout << fmt::format("[ offload  ] 3 lm_head tiles streamed ({}): evaluation loss {}, {} logits and 3 decoded "
                           "positions equal the resident run's bit for bit; without the 'head-in' wait: loss {}\n",
                           cfg.tie_word_embeddings ? "tied" : "untied", off.loss, res.logits.size(), early.loss);
  }
}

// LoRA with --offload params: the frozen base streams through the weight slots (fp32 layers, or
// their bf16 images), each acquired layer bound to its adapters, which train in device memory with
// their gradients and moments. 3 AdamW steps of 2 accumulated sequences give the adapters' losses,
// gradients, weights and moments bit for bit of the resident LoRA run, fp32 and bf16, in the chunk
// and the layer order, with --offload kv,params and a copy delay; no gradient crosses (the base
// has none), the weights cross as the planner counts them; a run that skips the wait for a
// layer's arrival differs (the control). With --train-embeddings-norms (untied models: the
// trainable embedding, final norm and layer norms resident, bound over the streamed base's) the
// same, the embedding and norms among what is compared, the control too; tied, it is refused
// naming the flags.
TEST_F(OffloadParams, LoraBitwiseIdenticalToResidentParameters) {
  const int64_t N = 37;
  int compared = 0;
  for (const bool embed_norms : {false, true})
  for (const auto& dir : *models_)
    for (const DType precision : {DType::F32, DType::BF16}) {
      LoraConfig lora;
      lora.rank = 4;
      lora.alpha = 8;
      lora.train_embeddings_norms = embed_norms;
      // (Phi-3: its qkv_proj whole; GLM-4: its gate_up_proj whole)
      const ModelConfig fused = load_config(dir);
      parse_lora_targets(fused.fused_qkv() ? "qkv,down" : fused.fused_gate_up() ? "q,v,gate_up,down" : "q,v,gate,down",
                         lora);
      auto with = [&](ChunkPlan p, SweepOrder order) {
        p.lora = lora;
        p.precision = precision;
        p.sweep = order;
        return p;
      };
      auto sim = make_sim_backend(0, 200);
      const ModelConfig c = load_config(dir);
      if (embed_norms && c.tie_word_embeddings) {
        SCOPED_TRACE(dir.filename().string());
        EXPECT_THROW(
            {
              try {
                Model m(c, *sim, with(plan_of(false, true), SweepOrder::Chunk));
              } catch (const Error& e) {
                EXPECT_THAT(e.what(), ::testing::HasSubstr("--offload params with --train-embeddings-norms on tied "
                                                           "embeddings: not supported yet"));
                throw;
              }
            },
            Error);
        continue;
      }
      const Trained ref = train_steps(*sim, dir, with(plan_of(false, false), SweepOrder::Chunk), "adamw", N, 3, 2);
      for (const bool kv : {false, true})
        for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer}) {
          SCOPED_TRACE(fmt::format("{} {} --offload {} --sweep {}{}", dir.filename().string(), dtype_name(precision),
                                   kv ? "kv,params" : "params", sweep_name(order),
                                   embed_norms ? " --train-embeddings-norms" : ""));
          EXPECT_EQ(difference(ref, train_steps(*sim, dir, with(plan_of(kv, true), order), "adamw", N, 3, 2)), "");
          ++compared;
        }
      if (dir != models_->front()) continue;
      std::string early;
      {
        auto held = make_sim_backend(0, kHoldCopies);
        EXPECT_EQ(difference(ref, train_steps(*held, dir, with(plan_of(false, true), SweepOrder::Chunk), "adamw", N, 3, 2)),
                  "") << "held";
        ParamStore::drop_wait_for_test("in");
        early = difference(ref, train_steps(*held, dir, with(plan_of(false, true), SweepOrder::Chunk), "adamw", N, 3, 2));
        ParamStore::drop_wait_for_test(nullptr);
        EXPECT_NE(early, "") << "without the 'in' wait the streamed base still arrives in time";
      }
      // what crosses: the base's layers and head, no gradient
      const ModelConfig cfg = load_config(dir);
      const ChunkPlan plan = with(plan_of(false, true), SweepOrder::Chunk);
      Model m(cfg, *sim, plan);
      load_for_training(m, dir);
      const auto t = step_tokens(N + 1, 1, cfg.vocab);
      m.forward_backward(t.data(), t.data() + 1, N, 1.0f);
      const ParamStore::Traffic got = m.store().traffic();
      // the frozen base's bf16 images are cast once, not per sequence, until the base is touched
      m.forward_backward(t.data(), t.data() + 1, N, 1.0f);
      EXPECT_EQ(m.store().image_casts(), precision == DType::BF16 ? 1 : 0);
      m.params();  // writable access: the base may change
      m.forward_backward(t.data(), t.data() + 1, N, 1.0f);
      EXPECT_EQ(m.store().image_casts(), precision == DType::BF16 ? 2 : 0);
      // (the trainable embedding stands in for the base's: no rows cross, 2 N d fp32 values less)
      const SweepTraffic want = chunk_order_traffic(cfg, N, 13, 1, precision == DType::BF16);
      EXPECT_EQ(got.weights_in, want.weights - (embed_norms ? 2 * N * cfg.hidden * 4 : 0));
      EXPECT_EQ(got.weights_in, sweep_traffic(cfg, plan, N).chunk.weights);
      EXPECT_EQ(got.grads_in + got.grads_out, 0);
      EXPECT_EQ(sweep_traffic(cfg, plan, N).chunk.grads, 0);
      EXPECT_EQ(sweep_traffic(cfg, plan, N).layer.grads, 0);
      std::cout << fmt::format("[ offload  ] LoRA {}{}: without the 'in' wait: {}; a sequence moves {} B of base weights, "
                               "0 B of gradients\n", dtype_name(precision), embed_norms ? " --train-embeddings-norms" : "",
                               early, got.weights_in);
    }
  std::cout << fmt::format("[ offload  ] {} offloaded LoRA runs of 3 AdamW steps x 2 sequences equal the resident LoRA "
                           "run bit for bit\n", compared);
}

// Skipping the wait for a layer's arrival, for an lm_head tile's, or the host's wait for the copies
// at the end of a sequence, gives another result (every copy held until something waits for it:
// the copies are still under way); so does skipping a fetch's wait for a layer's or a tile's
// gradients to have gone out, with the copies out held (the slot's gradients overwritten, or the
// host's read, before they left); once held with every wait, the same bits;
// tied to a streamed lm_head, so does adding a chunk's embedding part after the next chunk's lm_head
// part (the resident run's order broken). (Its wait for the tiles' gradients to come back first
// cannot be shown here: the simulated device's compute stream is the host, whose waits for the
// next tiles already order it.)
TEST_F(OffloadParams, SkippingAWaitBreaksIt) {
  const auto& dir = (*models_)[3];
  ASSERT_TRUE(ParamStore::streams_head(load_config(dir), false));
  auto sim = make_sim_backend(0, 2000);
  const Trained ref = train_steps(*sim, dir, plan_of(false, false), "adamw", 37, 2, 1);
  // (every copy held until something waits for it: without a wait the pass reads what has not
  // landed however busy the host; a finite delay's race was once lost under a full suite)
  auto held = make_sim_backend(0, kHoldCopies);
  EXPECT_EQ(difference(ref, train_steps(*held, dir, plan_of(false, true), "adamw", 37, 2, 1)), "") << "held";
  for (const char* wait : {"in", "head-in", "sync"}) {
    ParamStore::drop_wait_for_test(wait);
    const Trained off = train_steps(*held, dir, plan_of(false, true), "adamw", 37, 2, 1);
    ParamStore::drop_wait_for_test(nullptr);
    const std::string diff = difference(ref, off);
    EXPECT_NE(diff, "") << "without the '" << wait << "' wait the result is still the same";
    std::cout << fmt::format("[ offload  ] without the '{}' wait: {}\n", wait, diff);
  }
  // ('out': the 3-layer model, whose backward reuses a slot within the pass; 'head-out': 3 tiles)
  auto lagging = make_sim_backend(0, 20, kHoldCopies);  // (the copies out held)
  const auto& deep = (*models_)[1];
  const Trained deep_ref = train_steps(*sim, deep, plan_of(false, false), "adamw", 37, 2, 1);
  EXPECT_EQ(difference(ref, train_steps(*lagging, dir, plan_of(false, true), "adamw", 37, 2, 1)), "");
  EXPECT_EQ(difference(deep_ref, train_steps(*lagging, deep, plan_of(false, true), "adamw", 37, 2, 1)), "");
  for (const char* wait : {"out", "head-out"}) {
    const bool layers = std::string(wait) == "out";
    ParamStore::drop_wait_for_test(wait);
    const Trained off = train_steps(*lagging, layers ? deep : dir, plan_of(false, true), "adamw", 37, 2, 1);
    ParamStore::drop_wait_for_test(nullptr);
    const std::string diff = difference(layers ? deep_ref : ref, off);
    EXPECT_NE(diff, "") << "without the '" << wait << "' wait the result is still the same";
    std::cout << fmt::format("[ offload  ] copies out lagging, without the '{}' wait: {}\n", wait, diff);
  }
  const auto& tied = (*models_)[4];
  ASSERT_TRUE(ParamStore::streams_head(load_config(tied), false) && load_config(tied).tie_word_embeddings);
  // (the layer order: at layer 0 each chunk's lm_head part and embedding part follow each other
  // with no layer fetch between, which in the chunk order also orders the tiles' copies back)
  ChunkPlan layer_order = plan_of(false, true);
  layer_order.sweep = SweepOrder::Layer;
  const Trained tied_ref = train_steps(*sim, tied, plan_of(false, false), "adamw", 37, 2, 1);
  EXPECT_EQ(difference(tied_ref, train_steps(*sim, tied, plan_of(false, true), "adamw", 37, 2, 1)), "");
  EXPECT_EQ(difference(tied_ref, train_steps(*sim, tied, layer_order, "adamw", 37, 2, 1)), "");
  for (const char* wait : {"tied-order"}) {
    ParamStore::drop_wait_for_test(wait);
    const Trained off = train_steps(*sim, tied, layer_order, "adamw", 37, 2, 1);
    ParamStore::drop_wait_for_test(nullptr);
    const std::string diff = difference(tied_ref, off);
    EXPECT_NE(diff, "") << "tied: without '" << wait << "' the result is still the same";
    std::cout << fmt::format("[ offload  ] tied, without '{}': {}\n", wait, diff);
  }
}

// The optimizer's update beside the next step (Optimizer::overlap_with, the trainer's default with
// --offload params: host AdamW or SGD unit by unit, each tensor in one pass with its image and its
// gradient zeroed, while the next step's first layers wait for theirs) gives the bits of the update
// in place (the backend's ops, the images cast and the gradients zeroed by the store): every model,
// AdamW and SGD, fp32 and bf16, the chunk and the layer order, and --offload kv,params, with a copy
// delay and a slow update; so does the same update within the step (--no-overlap-update). Skipping
// any one of the pass's waits for a unit does not (the control: the update then really runs beside
// the pass).
TEST_F(OffloadParams, OverlappedUpdateEqualsTheUpdateInPlace) {
  const int64_t N = 37;
  int compared = 0;
  auto sim = make_sim_backend(0, 200);
  for (const auto& dir : *models_)
    for (const std::string opt : {"adamw", "sgd"})
      for (const DType precision : {DType::F32, DType::BF16})
        for (const SweepOrder order : {SweepOrder::Chunk, SweepOrder::Layer}) {
          ChunkPlan plan = plan_of(order == SweepOrder::Layer && dir == models_->front(), true);
          plan.precision = precision;
          plan.sweep = order;
          SCOPED_TRACE(fmt::format("{} {} {} --sweep {}{}", dir.filename().string(), opt, dtype_name(precision),
                                   sweep_name(order), plan.offload_kv ? " --offload kv,params" : ""));
          const Trained in_place = train_steps(*sim, dir, plan, opt, N, 3, 2, false);
          Optimizer::delay_update_for_test(compared % 2 ? 300 : 0);
          const Trained beside = train_steps(*sim, dir, plan, opt, N, 3, 2, true);
          Optimizer::delay_update_for_test(0);
          EXPECT_EQ(difference(in_place, beside), "");
          if (compared % 4 == 0) {  // (a quarter of the cases: the same code without the thread)
            EXPECT_EQ(difference(in_place, train_steps(*sim, dir, plan, opt, N, 3, 2, true, false)), "") << "within the step";
          }
          ++compared;
        }
  // each of the pass's waits for the update, skipped alone with the update held until the pass waits
  // for a later unit (or the step's end): another result (the 3-tile untied model, whose lm_head is
  // the update's last unit, read at the loss)
  const auto& wide = (*models_)[3];
  ASSERT_TRUE(ParamStore::streams_head(load_config(wide), false) && !load_config(wide).tie_word_embeddings);
  const Trained in_place = train_steps(*sim, wide, plan_of(false, true), "adamw", N, 2, 1, false);
  Optimizer::hold_update_for_test(true);  // held, with every wait: the same bits (the hold itself changes nothing)
  EXPECT_EQ(difference(in_place, train_steps(*sim, wide, plan_of(false, true), "adamw", N, 2, 1, true)), "") << "held";
  Optimizer::hold_update_for_test(false);
  std::string early;
  for (const char* wait : {"update-head", "update-layer", "update-lm"}) {
    Optimizer::hold_update_for_test(true);  // (each unit once the pass waits for one at or after it)
    ParamStore::drop_wait_for_test(wait);
    const std::string diff = difference(in_place, train_steps(*sim, wide, plan_of(false, true), "adamw", N, 2, 1, true));
    ParamStore::drop_wait_for_test(nullptr);
    Optimizer::hold_update_for_test(false);
    EXPECT_NE(diff, "") << "without the '" << wait << "' wait the next step still reads the updated weights";
    early += fmt::format("{}without '{}': {}", early.empty() ? "" : "; ", wait, diff);
  }
  std::cout << fmt::format("[ offload  ] {} runs with the update beside the next step equal the update in place bit "
                           "for bit; {}\n", compared, early);
}

// The bytes the store copies equal the planner's count for the chunk order (1 to 5 layers, 3
// chunks, 2 sequences a step, 2 steps; and 4 layers with a vocabulary of three lm_head tiles, which
// cross twice per chunk), and the layer order moves fewer at these shapes (from 4 layers: with
// fewer the two slots hold most of the model).
// With --precision bf16 the weights cross as the layers' images and the head's bf16 lm_head.
TEST(OffloadParamsTraffic, PlannerCountsTheBytesMoved) {
  int64_t fp32_weights = 0;
  for (const bool bf16 : {false, true})
  for (const auto& [L, wide] : {std::pair{int64_t(4), false}, {int64_t(5), false}, {int64_t(4), true},
                                {int64_t(1), false}, {int64_t(2), false}, {int64_t(3), false}}) {
    SCOPED_TRACE(fmt::format("{} layers{}{}", L, bf16 ? ", bf16" : "", wide ? ", 3 lm_head tiles" : ""));
    nlohmann::json j = tiny_config_json("qwen2", 2);
    j["num_hidden_layers"] = L;
    if (wide) j = wide_vocab(j);
    const ModelConfig cfg = parse_config(j, "traffic test config");
    auto sim = make_sim_backend();
    ChunkPlan plan = plan_of(false, true);
    plan.precision = bf16 ? DType::BF16 : DType::F32;
    Model m(cfg, *sim, plan);
    init_params(m.params(), 3);
    m.enable_grads();
    const int64_t N = 37, steps = 2, accum = 2;
    for (int64_t k = 0; k < steps; ++k) {
      m.zero_grads();
      for (int64_t micro = 0; micro < accum; ++micro) {
        const auto t = step_tokens(N + 1, uint64_t(k * accum + micro), cfg.vocab);
        const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
        m.forward_backward(ids.data(), tg.data(), N, 0.5f);
      }
    }
    const ParamStore::Traffic& got = m.store().traffic();
    const SweepTraffic want = chunk_order_traffic(cfg, N, 13, accum, bf16);
    EXPECT_EQ(got.weights_in, steps * want.weights);
    EXPECT_EQ(got.grads_in + got.grads_out, steps * want.grads);
    const SweepTraffic layer = layer_order_traffic(cfg, N, 13, accum, false, bf16);
    if (wide) {
      EXPECT_GT(ParamStore::head_tiles_copied(cfg, 6, bf16), cfg.vocab * cfg.hidden * (bf16 ? 2 : 4) * 2);
    }
    if (L == 4 && !bf16 && !wide) fp32_weights = got.weights_in;
    if (L == 4 && bf16 && !wide) {
      EXPECT_LT(got.weights_in, fp32_weights * 6 / 10) << "bf16 weights: about half fp32's bytes";
    }
    std::cout << fmt::format("[ traffic  ] {} layers{}{}, N = {}, C = 13: weights in {} B, gradients in {} B and out {} B "
                             "per 2 steps; the layer order would move {} B a step\n",
                             L, bf16 ? " (bf16)" : "", wide ? " (3 lm_head tiles)" : "", N, got.weights_in,
                             got.grads_in, got.grads_out, layer.total());
  }
}

// --precision bf16 with --offload kv,params: the device's weights are two layer images and the
// head (fp32 final norm, bf16 lm_head; the untied embedding stays on the host), the pinned host
// holds the fp32 masters, every layer's image and the embedding rows' staging; the plan equals
// every (tier, tag) peak, for 2 and 4 layers.
TEST(OffloadParamsMemory, Bf16PlanEqualsThePeaks) {
  ChunkPlan plan{64, 16};
  plan.offload_kv = plan.offload_params = true;
  plan.offload_group = 2;
  plan.precision = DType::BF16;
  Accountant& acc = Accountant::global();
  for (const int64_t L : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} layers", L));
    nlohmann::json j = tiny_config_json("qwen2", 2);
    j["num_hidden_layers"] = L;
    const ModelConfig cfg = parse_config(j, "bf16 memory test config");
    acc.reset_peaks();
    const MemoryPlan pred = oomb::testing::train_for_peaks(cfg, plan, 256, true, 2);
    expect_peaks_equal(pred);
    const int64_t dev_w = acc.get(Tier::Device, Tag::Weights).peak;
    EXPECT_EQ(dev_w, 2 * ParamStore::layer_image_bytes(cfg) + ParamStore::head_image_bytes(cfg));
    const int64_t staged = 2 * plan.chunk * cfg.hidden * 4;  // the embedding's staging: two slots of a chunk's rows
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::Weights).peak, param_count(cfg) * 4 + ParamStore::host_image_bytes(cfg) + staged);
    EXPECT_LT(ParamStore::layer_image_bytes(cfg), ParamStore::layer_numel(cfg) * 4 * 6 / 10);
    std::cout << fmt::format("[ memory   ] bf16, {} layers: device weights {} B (fp32 offloaded: {} B), a layer's "
                             "image {} B (fp32: {} B)\n", L, dev_w, ParamStore::device_bytes(cfg),
                             ParamStore::layer_image_bytes(cfg), ParamStore::layer_numel(cfg) * 4);
  }
}

// LoRA with --offload kv,params (fp32 and bf16): the plan equals every (tier, tag) peak; the
// device holds the streamed base's two layer slots and head, and the adapters with their
// gradients and moments (no gradient slots); the pinned host holds the base's masters (bf16: the
// frozen base once, its layers their own images, and a tied lm_head's bf16 copy). With
// --train-embeddings-norms the trainable set (on the device) holds the embedding and norms too.
TEST(OffloadParamsMemory, LoraPlanEqualsThePeaks) {
  Accountant& acc = Accountant::global();
  const ModelConfig cfg = parse_config(tiny_config_json("qwen2", 2), "LoRA memory test config");
  for (const bool embed_norms : {false, true})
  for (const DType precision : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(fmt::format("{}{}", dtype_name(precision), embed_norms ? " --train-embeddings-norms" : ""));
    ChunkPlan plan{64, 16};
    plan.offload_kv = plan.offload_params = true;
    plan.offload_group = 2;
    plan.precision = precision;
    plan.lora.rank = 4;
    plan.lora.train_embeddings_norms = embed_norms;
    parse_lora_targets("all", plan.lora);
    acc.reset_peaks();
    const MemoryPlan pred = oomb::testing::train_for_peaks(cfg, plan, 256, true, 2);
    expect_peaks_equal(pred);
    const bool bf16 = precision == DType::BF16;
    const int64_t Pt = lora_param_count(cfg, plan.lora);
    if (embed_norms) {
      EXPECT_GT(Pt, cfg.vocab * cfg.hidden);  // (the embedding among them)
    }
    EXPECT_EQ(acc.get(Tier::Device, Tag::Grads).peak, Pt * 4);
    EXPECT_EQ(acc.get(Tier::Device, Tag::Optimizer).peak, 2 * Pt * 4);
    EXPECT_EQ(acc.get(Tier::Device, Tag::Weights).peak,
              ParamStore::device_weight_bytes(cfg, bf16) + Pt * 4 + (bf16 ? Bf16Weights::adapter_bytes(cfg, plan.lora) : 0));
    const int64_t base = bf16 ? frozen_bf16_bytes(cfg) + (cfg.tie_word_embeddings ? cfg.vocab * cfg.hidden * 2 : 0)
                              : param_count(cfg) * 4;
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::Weights).peak,
              base + (cfg.tie_word_embeddings || embed_norms ? 0 : 2 * plan.chunk * cfg.hidden * 4));  // (untied: the
              // embedding's staging; none where the trainable embedding stands in for it)
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::Grads).peak, 0);  // (the frozen embedding's rows send no gradients)
    std::cout << fmt::format("[ memory   ] LoRA {}{} with --offload kv,params: device weights {} B, gradients {} B, "
                             "moments {} B; pinned weights {} B\n", dtype_name(precision),
                             embed_norms ? " --train-embeddings-norms" : "",
                             acc.get(Tier::Device, Tag::Weights).peak, acc.get(Tier::Device, Tag::Grads).peak,
                             acc.get(Tier::Device, Tag::Optimizer).peak, acc.get(Tier::Pinned, Tag::Weights).peak);
  }
}

// Models of 2, 4, 8 and 16 layers (same width, same N) with --offload kv,params: every device tag
// but activations peaks at the same bytes; activations grow by each layer's saved input (C x d)
// and attention output and LSE (C x H x D, C x H), nothing else; the weights and gradients on the
// device are two layer slots and the head but the embedding (untied: it stays on the host, its
// rows staged in pinned memory); the plan equals every (tier, tag) peak.
TEST(OffloadParamsMemory, DeviceMemoryIndependentOfDepth) {
  const int64_t N = 256, C = 64;
  ChunkPlan plan{C, 16};
  plan.offload_kv = true;
  plan.offload_group = 2;
  plan.offload_params = true;
  Accountant& acc = Accountant::global();
  std::map<std::string, int64_t> first;
  int64_t first_layers = 0, first_act = 0;
  for (const int64_t L : {2, 4, 8, 16}) {
    SCOPED_TRACE(fmt::format("{} layers", L));
    nlohmann::json j = tiny_config_json("llama", 1);
    j["num_hidden_layers"] = L;
    const ModelConfig cfg = parse_config(j, "depth test config");
    acc.reset_peaks();
    MemoryPlan pred;
    pred = oomb::testing::train_for_peaks(cfg, plan, N, true, 2);  // (the masters are in host memory: no copy)
    std::map<std::string, int64_t> device;
    for (Tier tier : kTiers)
      for (int i = 0; i < kNumTags; ++i) {
        if (Tag(i) == Tag::IO) continue;
        const int64_t peak = acc.get(tier, Tag(i)).peak;
        EXPECT_EQ(peak, pred.get(tier, Tag(i))) << tier_name(tier) << " " << tag_name(Tag(i)) << ": plan";
        if (tier == Tier::Device && Tag(i) != Tag::Activations) device[std::string(tag_name(Tag(i)))] = peak;
      }
    // two layer slots and the head (lm_head, final norm), from the parameter counts
    nlohmann::json j1 = j, j2 = j;
    j1["num_hidden_layers"] = 1, j2["num_hidden_layers"] = 2;
    const int64_t P1 = param_count(parse_config(j1, "1")), layer = param_count(parse_config(j2, "2")) - P1;
    ASSERT_FALSE(cfg.tie_word_embeddings);
    const int64_t embedding = cfg.vocab * cfg.hidden * 4, staged = C * cfg.hidden * 4 * 2;
    EXPECT_EQ(acc.get(Tier::Device, Tag::Weights).peak, (2 * layer + P1 - layer) * 4 - embedding);
    EXPECT_EQ(acc.get(Tier::Device, Tag::Grads).peak, (2 * layer + P1 - layer) * 4 - embedding);
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::Weights).peak, param_count(cfg) * 4 + staged);
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::Grads).peak, param_count(cfg) * 4 + staged);
    EXPECT_EQ(acc.get(Tier::Host, Tag::Optimizer).peak, 2 * param_count(cfg) * 4);  // (no pinning: the host's alone)
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::Optimizer).peak, 0);
    const int64_t act = acc.get(Tier::Device, Tag::Activations).peak;
    std::cout << fmt::format("[ memory   ] {:>2} layers ({:>7} parameters): device {:>8} B (weights {} B, "
                             "activations {} B), pinned {:>9} B\n",
                             L, param_count(cfg), pred.total(Tier::Device), acc.get(Tier::Device, Tag::Weights).peak,
                             act, pred.total(Tier::Pinned));
    if (first.empty()) {
      first = device, first_layers = L, first_act = act;
      continue;
    }
    EXPECT_EQ(device, first) << "a device tag other than activations grew with depth";
    const int64_t per_layer = C * cfg.hidden * 4 + C * cfg.heads * cfg.head_dim * 4 + C * cfg.heads * 4;
    EXPECT_EQ(act - first_act, (L - first_layers) * per_layer);
  }
}

// A vocabulary of three lm_head tiles (20000 x 32), --offload kv,params: the device holds two tile
// slots of the lm_head's weights and two of its gradients instead of the whole lm_head and its
// gradient, and no embedding (it stays on the host): (V - 2 Vt) d x 4 bytes less of each than two
// layer slots and the whole head (from the parameter counts), and V d x 4 more untied (its
// embedding); tied, the tiles are rows of the embedding, which the host holds once; fp32 and bf16;
// the plan equals every (tier, tag) peak.
TEST(OffloadParamsMemory, StreamedLmHeadSavesItsTilesWorth) {
  ChunkPlan plan{64, 16};
  plan.offload_kv = plan.offload_params = true;
  plan.offload_group = 2;
  Accountant& acc = Accountant::global();
  for (const bool tied : {false, true})
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(fmt::format("{}{}", tied ? "tied" : "untied", bf16 ? ", bf16" : ""));
      nlohmann::json j = wide_vocab(tiny_config_json("qwen2", 2));
      j["tie_word_embeddings"] = tied;
      const ModelConfig cfg = parse_config(j, "wide vocabulary test config");
      const int64_t V = cfg.vocab, d = cfg.hidden, Vt = lm_head_vocab_tile(V);
      ASSERT_EQ((V + Vt - 1) / Vt, 3);
      EXPECT_TRUE(ParamStore::streams_head(cfg, false));
      EXPECT_TRUE(ParamStore::embeds_on_host(cfg, false));
      plan.precision = bf16 ? DType::BF16 : DType::F32;
      acc.reset_peaks();
      const MemoryPlan pred = oomb::testing::train_for_peaks(cfg, plan, 256, true, 2);
      expect_peaks_equal(pred);
      nlohmann::json j1 = j, j2 = j;
      j1["num_hidden_layers"] = 1, j2["num_hidden_layers"] = 2;
      const int64_t P1 = param_count(parse_config(j1, "1")), layer = param_count(parse_config(j2, "2")) - P1;
      const int64_t whole = (2 * layer + P1 - layer) * 4, saved = (V - 2 * Vt) * d * 4 + (tied ? 0 : V * d * 4);
      const int64_t grads = acc.get(Tier::Device, Tag::Grads).peak, weights = acc.get(Tier::Device, Tag::Weights).peak;
      EXPECT_EQ(grads, whole - saved);
      if (!bf16) {
        EXPECT_EQ(weights, whole - saved);
      }
      std::cout << fmt::format("[ memory   ] vocab {} ({} tiles of {}), d {}, {}{}: device weights {} B, gradients {} B "
                               "({} B less of each than the whole head{})\n",
                               V, 3, Vt, d, tied ? "tied" : "untied", bf16 ? ", bf16" : "", weights, grads, saved,
                               bf16 ? "'s fp32 gradient" : "");
    }
}

// The host check counts pinned and host memory: a 70B shape whose masters and gradients (pinned)
// and moments (host), 1.1 TB, exceed the host is refused before it starts, naming the tag and its
// bytes.
TEST(OffloadParamsMemory, HostThatCannotHoldTheParametersIsRefused) {
  const ModelConfig cfg = preset_config("llama-3.1-70b");
  ChunkPlan plan{4096, 128};
  plan.offload_kv = plan.offload_params = true;
  auto plan_for = [&](int64_t n, int64_t c) {
    ChunkPlan p = plan;
    p.chunk = c;
    return plan_memory(cfg, p, n, "adamw", cuda_workspace_bytes(workspace_shape(cfg, c)), Tier::Device,
                       cuda_pinned_workspace_bytes());
  };
  const MemoryPlan m = plan_for(32768, 4096);
  const int64_t moments = 2 * param_count(cfg) * 4;
  EXPECT_EQ(m.get(Tier::Host, Tag::Optimizer), moments);
  const std::string e = error_of([&] {
    cli::check_plan_fits(m, 32768, 4096, {int64_t(512) << 30, "MemAvailable"}, {}, plan_for,
                         false, nullptr);
  });
  EXPECT_NE(e.find("host memory"), std::string::npos) << e;
  EXPECT_NE(e.find(fmt::format("optimizer the most: {}", format_bytes(moments))), std::string::npos) << e;
  EXPECT_NE(e.find("no length fits"), std::string::npos) << e;
  std::cout << "[ refused  ] " << e << "\n";
}

}  // namespace
