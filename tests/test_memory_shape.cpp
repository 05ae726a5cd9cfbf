// The shape of memory, through the accountant: for a fixed chunk size, every tag but kv and kv_grad
// peaks at the same bytes for N = 1K .. 16K (16x: every N runs the same code; 64K, whose attention is
// quadratic in N, added four minutes of the suite and nothing else); kv equals the page formula; kv_grad stays within the
// formula for the N - C tokens before the last chunk; `oomb plan`'s prediction equals every peak.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sstream>

#include "backend/backend.h"
#include "data/repeat_task.h"
#include "model/init.h"
#include "train/model.h"
#include "model_fixture.h"
#include "train/trainer.h"

using namespace oomb;

namespace {

ModelConfig small_config() {
  nlohmann::json j = oomb::testing::tiny_config_json("llama", 1);
  j["hidden_size"] = 8;
  j["num_attention_heads"] = 1;
  j["head_dim"] = 4;
  j["intermediate_size"] = 24;
  return parse_config(j, "memory-shape test config");
}

struct Peaks {
  std::map<std::string, int64_t> by_tag;
};

Peaks one_step(const ModelConfig& cfg, int64_t N, const ChunkPlan& plan, MemoryPlan* predicted) {
  Accountant& acc = Accountant::global();
  for (int i = 0; i < kNumTags; ++i) EXPECT_EQ(acc.get(Tier::Host, Tag(i)).current, 0) << "leftover " << tag_name(Tag(i));
  acc.reset_peaks();
  Peaks p;
  *predicted = oomb::testing::train_for_peaks(cfg, plan, N, false);
  for (int i = 0; i < kNumTags; ++i) p.by_tag[std::string(tag_name(Tag(i)))] = acc.get(Tier::Host, Tag(i)).peak;
  return p;
}

TEST(MemoryShape, OnlyKvGrowsWithTheSequence) {
  const ModelConfig cfg = small_config();
  const ChunkPlan plan{512, 128};
  const int64_t G = cfg.kv_heads, D = cfg.head_dim, L = cfg.layers, P = plan.page_size, C = plan.chunk;
  std::map<std::string, int64_t> first;
  for (int64_t N : {1024, 4096, 16384}) {
    SCOPED_TRACE(fmt::format("N={}", N));
    MemoryPlan pred;
    const Peaks pk = one_step(cfg, N, plan, &pred);
    const auto at = [&](const char* tag) { return pk.by_tag.at(tag); };
    // kv: layers x 2 x kv_heads x head_dim x bytes x pages x page_size
    const int64_t pages = (N + P - 1) / P, pages_before_last = (N - C + P - 1) / P;
    EXPECT_EQ(at("kv"), L * 2 * G * D * 4 * pages * P);
    EXPECT_LE(at("kv_grad"), L * 2 * G * D * 4 * pages_before_last * P);
    // the plan, tag by tag, exactly
    EXPECT_EQ(at("weights"), pred.get(Tier::Host, Tag::Weights));
    EXPECT_EQ(at("grads"), pred.get(Tier::Host, Tag::Grads));
    EXPECT_EQ(at("optimizer"), pred.get(Tier::Host, Tag::Optimizer));
    EXPECT_EQ(at("activations"), pred.get(Tier::Host, Tag::Activations));
    EXPECT_EQ(at("kv"), pred.get(Tier::Host, Tag::KV));
    EXPECT_EQ(at("kv_grad"), pred.get(Tier::Host, Tag::KVGrad));
    EXPECT_EQ(at("workspace"), pred.get(Tier::Host, Tag::Workspace));
    EXPECT_EQ(at("data"), pred.get(Tier::Host, Tag::Data));
    std::cout << fmt::format("[ memory   ] N={:>6}: kv {:>10} B, kv_grad {:>10} B, activations {} B, total {} B\n", N,
                             at("kv"), at("kv_grad"), at("activations"), pred.total());
    if (first.empty()) first = pk.by_tag;
    for (const auto& [tag, bytes] : pk.by_tag) {
      if (tag != "kv" && tag != "kv_grad") {
        EXPECT_EQ(bytes, first.at(tag)) << tag << " grew with N";
      }
    }
  }
}

// --offload kv on the simulated device: the device tier's peak is the same at every N (pages live
// in pinned host memory; the device holds two groups and the chunk's staging); the pinned tier
// holds exactly the page formula; the plan equals every (tier, tag) peak.
TEST(MemoryShape, OffloadKeepsTheDeviceFlat) {
  const ModelConfig cfg = small_config();
  ChunkPlan plan{512, 128};
  plan.offload_kv = true;
  plan.offload_group = 4;
  const int64_t G = cfg.kv_heads, D = cfg.head_dim, L = cfg.layers, P = plan.page_size, C = plan.chunk;
  Accountant& acc = Accountant::global();
  std::map<std::string, int64_t> first_device;
  for (int64_t N : {2048, 8192, 16384}) {
    SCOPED_TRACE(fmt::format("N={}", N));
    acc.reset_peaks();
    MemoryPlan pred;
    pred = oomb::testing::train_for_peaks(cfg, plan, N, true);
    std::map<std::string, int64_t> device;
    for (Tier tier : kTiers)
      for (int i = 0; i < kNumTags; ++i) {
        if (Tag(i) == Tag::IO) continue;
        const int64_t peak = acc.get(tier, Tag(i)).peak;
        EXPECT_EQ(peak, pred.get(tier, Tag(i))) << tier_name(tier) << " " << tag_name(Tag(i)) << ": plan";
        if (tier == Tier::Device) device[std::string(tag_name(Tag(i)))] = peak;
      }
    const int64_t page = 2 * P * G * D * 4;  // K and V, f32
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::KV).peak, L * ((N + P - 1) / P) * page);
    EXPECT_EQ(acc.get(Tier::Pinned, Tag::KVGrad).peak, L * ((N - C + P - 1) / P) * page);
    std::cout << fmt::format("[ memory   ] N={:>6}: device {:>9} B (kv {} B, kv_grad {} B); pinned kv {:>10} B, "
                             "kv_grad {:>10} B\n",
                             N, pred.total(Tier::Device), device["kv"], device["kv_grad"],
                             acc.get(Tier::Pinned, Tag::KV).peak, acc.get(Tier::Pinned, Tag::KVGrad).peak);
    if (first_device.empty()) first_device = device;
    EXPECT_EQ(device, first_device) << "the device tier grew with N";
  }
}

}  // namespace
