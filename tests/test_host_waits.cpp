// The host never drains the device inside a training step except a fixed number of times per step
// (the loss and the gradient norm read back, the end of a sequence): on the simulated device,
// which counts every host wait (Backend::host_waits), a step's drains are the same for 4 chunks as
// for 8 and for 2 layers as for 4, resident, offloaded (kv, params, both), with documents, in
// bf16, in the layer order and with LoRA. Page-sparse attention adds exactly one per layer and
// chunk of the forward sweep that chooses (the chosen pages come down to build the attention's
// block list on the host; the backward sweep reuses the record). Waits for one event (the bounded
// run-ahead of double-buffered staging) may grow with the work; they are printed beside the drains.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backend/backend.h"
#include "kv/sparse_select.h"
#include "model/lora.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

WaitsPerStep waits_on_sim(const std::filesystem::path& dir, const ChunkPlan& plan, int64_t N) {
  auto be = make_sim_backend();
  return waits_per_step(*be, dir, plan, N);
}

std::filesystem::path model_dir(int64_t layers, bool tied, int64_t vocab = 61) {
  const auto dir = temp_dir(fmt::format("_{}{}_{}", layers, tied ? "_tied" : "", vocab));
  nlohmann::json j = tiny_config_json("qwen2", 2);
  j["num_hidden_layers"] = layers;
  j["tie_word_embeddings"] = tied;
  j["vocab_size"] = vocab;
  write_tiny_model(dir, j, 3);
  return dir;
}

}  // namespace

TEST(HostWaits, DrainsPerStepDoNotGrowWithChunksOrLayers) {
  ASSERT_GE(make_sim_backend()->host_waits().drains, 0) << "the simulated device counts its host waits";
  // (tied_wide: three lm_head tiles, streamed with the embedding in host memory under --offload params)
  const auto two = model_dir(2, false), four = model_dir(4, false), tied = model_dir(2, true),
             tied_wide = model_dir(2, true, 20000);
  struct Case {
    const char* name;
    ChunkPlan plan;
    const std::filesystem::path* dir;
  };
  auto plan = [](auto&& set) {
    ChunkPlan p{32, 16};
    set(p);
    return p;
  };
  const Case cases[] = {
      {"resident", plan([](ChunkPlan&) {}), &two},
      {"tied embedding", plan([](ChunkPlan&) {}), &tied},
      {"--offload kv", plan([](ChunkPlan& p) { p.offload_kv = true, p.offload_group = 2; }), &two},
      {"--offload params", plan([](ChunkPlan& p) { p.offload_params = true; }), &two},
      {"--offload kv,params, tied", plan([](ChunkPlan& p) { p.offload_kv = p.offload_params = true; }), &tied},
      {"--offload params, tied, 3 lm_head tiles", plan([](ChunkPlan& p) { p.offload_params = true; }), &tied_wide},
      {"--sweep layer, --offload params, tied, 3 lm_head tiles",
       plan([](ChunkPlan& p) { p.sweep = SweepOrder::Layer, p.offload_params = true; }), &tied_wide},
      {"--precision bf16, --offload kv,params",
       plan([](ChunkPlan& p) { p.precision = p.kv_dtype = DType::BF16, p.offload_kv = p.offload_params = true; }),
       &two},
      {"--doc-mask", plan([](ChunkPlan& p) { p.doc_sep = 5; }), &two},
      {"--sparse-pages 1", plan([](ChunkPlan& p) { p.sparse = sparse_options(1, 16, 1, false, "mean", 32, 2); }),
       &two},
      {"--sweep layer, --offload kv,params",
       plan([](ChunkPlan& p) { p.sweep = SweepOrder::Layer, p.offload_kv = p.offload_params = true; }), &two},
      {"LoRA, --offload params", plan([](ChunkPlan& p) {
         p.lora.rank = 4, p.lora.alpha = 8, p.offload_params = true;
         parse_lora_targets("q,v,down", p.lora);
       }), &two},
  };
  const WaitsPerStep dense = waits_on_sim(two, cases[0].plan, 128);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const WaitsPerStep base = waits_on_sim(*c.dir, c.plan, 128);  // 4 chunks of 32
    const WaitsPerStep longer = waits_on_sim(*c.dir, c.plan, 256);  // 8 chunks
    const WaitsPerStep deeper = waits_on_sim(four, c.plan, 128);    // 4 layers
    if (c.plan.sparse.on()) {
      // pages of 16, chunks of 32, one sink: a chunk chooses when it has more than K + 1 earlier
      // pages (chunk 2 on); two sequences a step
      auto choosing = [](int64_t chunks) { return chunks - 2; };
      EXPECT_EQ(base.drains, dense.drains + 2 * 2 * choosing(4));
      EXPECT_EQ(longer.drains, dense.drains + 2 * 2 * choosing(8));
      EXPECT_EQ(deeper.drains, dense.drains + 2 * 4 * choosing(4));
    } else {
      EXPECT_EQ(longer.drains, base.drains) << "a drain per chunk";
      if (c.dir == &two) {
        EXPECT_EQ(deeper.drains, base.drains) << "a drain per layer";
      }
      EXPECT_LE(base.drains, 8) << "drains per step";
    }
    EXPECT_EQ(base.allocations, 0) << "a steady-state step allocated";
    std::cout << fmt::format("[ waits    ] {}: drains a step {} (N = 128), {} (N = 256), {} (4 layers); event waits {}, "
                             "{}, {}\n", c.name, base.drains, longer.drains, deeper.drains, base.event_waits,
                             longer.event_waits, deeper.event_waits);
  }
}
