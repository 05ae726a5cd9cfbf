// Training checkpoints (train/checkpoint.h): a run resumed from a checkpoint equals the uninterrupted
// run bit for bit (every loss, gradient norm and the final weights; CPU and the simulated device,
// also with --offload params and its update beside the next step, slowed so that a checkpoint not
// waiting for it would differ; AdamW and SGD, shuffled data, accumulation, chunks); its weights load
// in the float64 oracle; a checkpoint that is not complete does not load, naming the file;
// --keep-last and the clean-up of killed writers' leftovers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <unistd.h>
#include <fstream>
#include <map>
#include <sstream>

#include "backend/backend.h"
#include "data/packed_tokens.h"
#include "hf/checkpoint.h"
#include "hf/safetensors.h"
#include "model_fixture.h"
#include "checkpoint_runs.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/trainer.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

// Trains on `device` (cpu, sim, or sim-offload: --offload params with its update beside the next
// step, slowed so that a checkpoint written before it ends would hold the weights before it).
RunResult run(const fs::path& dir, const std::string& device, const std::string& optimizer, const fs::path& resume = {},
              int64_t stop_after = -1) {
  auto be = device.starts_with("sim") ? make_sim_backend() : make_cpu_backend();
  ChunkPlan plan{16, 8};
  plan.offload_params = device == "sim-offload";
  return checkpoint_run(*be, device, plan, dir, optimizer, resume, stop_after);
}

TEST(TrainCheckpoint, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 11);
  write_tokens(dir / "t.bin", 2000, 61, 12);
  int compared = 0;
  for (const char* device : {"cpu", "sim", "sim-offload"}) {
    for (const char* optimizer : {"adamw", "sgd"}) {
      SCOPED_TRACE(fmt::format("{} {}", device, optimizer));
      const RunResult whole = run(dir, device, optimizer);
      ASSERT_EQ(whole.loss.size(), size_t(kSteps));
      for (int64_t k : {1, 3, 6}) {
        SCOPED_TRACE(fmt::format("interrupted after step {}", k));
        const RunResult first = run(dir, device, optimizer, {}, k);
        ASSERT_EQ(first.loss.size(), size_t(k));
        const RunResult rest = run(dir, device, optimizer, first.checkpoint);
        EXPECT_EQ(resume_difference(whole, first, rest, k), "");
        compared += kSteps;
      }
    }
  }
  std::cout << "steps compared bit for bit (loss, gradient norm, lr): " << compared << std::endl;
}

// The checkpoint's weights load as a Hugging Face model directory, its moments as safetensors.
TEST(TrainCheckpoint, LayoutLoadsAsAModelDirectory) {
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("llama", 2), 3, DType::BF16);
  write_tokens(dir / "t.bin", 2000, 61, 4);
  const RunResult r = run(dir, "cpu", "adamw", {}, 2);
  EXPECT_EQ(r.checkpoint, dir / "ck-cpu-adamw" / "step-000002");
  for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors", "state.json"})
    EXPECT_TRUE(fs::exists(r.checkpoint / f)) << f;
  EXPECT_EQ(load_config(r.checkpoint).torch_dtype, "float32");  // fp32 masters, whatever was loaded
  Params w(cfg, Tier::Host, Tag::IO);
  EXPECT_EQ(load_weights(r.checkpoint, cfg, w), DType::F32);
  EXPECT_EQ(0, std::memcmp(w.flat().data, r.params.data(), r.params.size() * 4));
  const SafetensorsModel opt = SafetensorsModel::open(r.checkpoint / "optimizer.safetensors");
  EXPECT_EQ(opt.names().size(), 2 * w.specs().size());
  EXPECT_NE(opt.find("model.embed_tokens.weight.exp_avg"), nullptr);
  EXPECT_NE(opt.find("model.norm.weight.exp_avg_sq"), nullptr);
  const CheckpointState st = open_checkpoint(r.checkpoint);
  EXPECT_EQ(st.step, 2);
  EXPECT_EQ(st.adam_step, 2);
  EXPECT_EQ(st.files.size(), 3u);
}

// A saved model (an --out, a checkpoint, a merge) carries the tokenizer's and the chat's files of the
// directory it came from, the named chat templates' folder included, so that the saved model chats
// and tokenizes as its source did; files the source lacks are not made up.
TEST(TrainCheckpoint, SavedModelCarriesTheTokenizerAndChatFiles) {
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir / "src", tiny_config_json("llama", 2), 3);
  const std::map<std::string, std::string> files = {
      {"tokenizer.json", "{}"}, {"tokenizer_config.json", "{\"eos_token\": \"x\"}"},
      {"chat_template.jinja", "{{ messages }}"}, {"additional_chat_templates/tool_use.jinja", "{{ tools }}"},
      {"generation_config.json", "{}"}, {"tokenizer.model", "sp"}};
  for (const auto& [name, text] : files) {
    fs::create_directories((dir / "src" / name).parent_path());
    std::ofstream(dir / "src" / name) << text;
  }
  Params w(cfg, Tier::Host, Tag::IO);
  load_weights(dir / "src", cfg, w);
  save_model(dir / "out", cfg, w, DType::F32, dir / "src");
  for (const auto& [name, text] : files) EXPECT_EQ(read_text(dir / "out" / name), text) << name;
  EXPECT_FALSE(fs::exists(dir / "out" / "merges.txt"));
}

// A checkpoint's weights load in the float64 oracle (tests/oracle/torch_oracle.py, reading the
// directory as Hugging Face's loader would, beside the optimizer's file and state.json): its loss and
// gradients on the checkpoint's weights are the engine's, loaded from the same checkpoint, within
// test_oracle's bounds.
TEST(TrainCheckpoint, WeightsLoadInTheFloat64Oracle) {
  std::string why;
  if (!torch_available(&why)) OOMB_MISSING_REFERENCE(why);
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("qwen2", 2), 9);
  write_tokens(dir / "t.bin", 2000, 61, 10);
  const RunResult r = run(dir, "cpu", "adamw", {}, 3);
  const int64_t N = 40;
  const auto e = write_tokens(dir / "eval.bin", N + 1, cfg.vocab, 13);
  const std::string cmd = fmt::format("{} {}/tests/oracle/torch_oracle.py --model {} --tokens {} --out {} > {} 2>&1",
                                      torch_python(), source_dir().string(), r.checkpoint.string(),
                                      (dir / "eval.bin").string(), (dir / "oracle.safetensors").string(),
                                      (dir / "oracle.log").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the oracle did not load the checkpoint: " << read_text(dir / "oracle.log");
  auto be = make_cpu_backend();
  Model m(load_config(r.checkpoint), *be, ChunkPlan{16, 8});
  load_for_training(m, r.checkpoint);
  const LossStats ls = m.forward_backward(e.data(), e.data() + 1, N, 1.0f);
  const SafetensorsModel ref = SafetensorsModel::open(dir / "oracle.safetensors");
  float want_loss = 0;
  ref.read_f32("loss", &want_loss);
  EXPECT_LE(std::abs(ls.loss_sum / double(N) - want_loss) / want_loss, 2.5e-7);
  double worst = 0;
  for (const ParamSpec& s : m.grads().specs()) {
    std::vector<float> want(static_cast<size_t>(s.numel()));
    ref.read_f32("grad." + s.name, want.data(), s.shape);
    worst = std::max(worst, rel_error(m.grads().view(s).f(), want.data(), want.size()));
  }
  EXPECT_LE(worst, 6e-6);
  // the checkpoint is of the trained weights, not the initial ones
  Params init(cfg, Tier::Host, Tag::IO), saved(cfg, Tier::Host, Tag::IO);
  load_weights(dir, cfg, init);
  load_weights(r.checkpoint, cfg, saved);
  EXPECT_NE(0, std::memcmp(init.flat().data, saved.flat().data, size_t(init.flat().numel()) * 4));
  std::cout << fmt::format("float64 oracle on the step-3 checkpoint: loss {:.8f} vs {:.8f}, worst gradient rel. "
                           "error {:.2e}\n", ls.loss_sum / double(N), want_loss, worst);
}

TEST(TrainCheckpoint, AnIncompleteCheckpointDoesNotLoadAndNamesTheFile) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 5);
  write_tokens(dir / "t.bin", 2000, 61, 6);
  const fs::path ck = run(dir, "cpu", "adamw", {}, 2).checkpoint;
  auto damaged = [&](const std::function<void(const fs::path&)>& damage) {
    const fs::path d = dir / "damaged" / "step-000002";
    fs::remove_all(d.parent_path());
    fs::create_directories(d.parent_path());
    fs::copy(ck, d);
    damage(d);
    return error_of([&] {
      const CheckpointState st = open_checkpoint(d);
      const ModelConfig cfg = load_config(d);
      Params w(cfg, Tier::Host, Tag::IO), m(cfg, Tier::Host, Tag::IO), v(cfg, Tier::Host, Tag::IO);
      load_checkpoint_tensors(d, st, cfg, w, &m, &v);
    });
  };
  EXPECT_EQ(damaged([](const fs::path&) {}), "(no error)");
  EXPECT_THAT(damaged([](const fs::path& d) { fs::remove(d / "state.json"); }),
              HasSubstr("step-000002: not a complete checkpoint: state.json is missing"));
  EXPECT_THAT(damaged([](const fs::path& d) { fs::remove(d / "optimizer.safetensors"); }),
              HasSubstr("step-000002: optimizer.safetensors is missing (state.json lists it"));
  EXPECT_THAT(damaged([](const fs::path& d) { fs::remove(d / "config.json"); }),
              HasSubstr("step-000002: config.json is missing"));
  EXPECT_THAT(damaged([](const fs::path& d) { fs::resize_file(d / "model.safetensors", 1000); }),
              ::testing::ContainsRegex("step-000002: model.safetensors holds 1000 bytes, state.json says [0-9]+"));
  EXPECT_THAT(damaged([](const fs::path& d) {
                std::string s = read_text(d / "state.json");
                s.resize(s.size() / 2);
                write_bytes(d / "state.json", s);
              }),
              HasSubstr("step-000002/state.json: not valid JSON"));
  EXPECT_THAT(damaged([](const fs::path& d) { fs::rename(d, d.parent_path() / "step-000004"); }),
              HasSubstr("step-000002: not a checkpoint directory (it does not exist)"));
  EXPECT_THAT(error_of([&] { open_checkpoint(dir / "damaged"); }),
              HasSubstr("damaged: not a complete checkpoint: state.json is missing"));
  // the state must match the directory's name
  const fs::path renamed = dir / "renamed" / "step-000004";
  fs::create_directories(renamed.parent_path());
  fs::copy(ck, renamed);
  EXPECT_THAT(error_of([&] { open_checkpoint(renamed); }),
              HasSubstr("step-000004: state.json says step 2, the directory's name step 4"));
}

TEST(TrainCheckpoint, LatestPassesOverIncompleteOnesAndKeepLastDeletesOnlyOlderOnes) {
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("qwen2", 2), 7);
  write_tokens(dir / "t.bin", 2000, 61, 8);
  const fs::path ck = run(dir, "cpu", "sgd", {}, 2).checkpoint, ckdir = ck.parent_path();
  EXPECT_EQ(latest_checkpoint(ckdir, nullptr), ck);
  EXPECT_EQ(latest_checkpoint(dir / "none", nullptr), fs::path());
  // steps 4, 6 and 8 as copies whose state says so; step 10 without its state (never completed)
  for (int s : {4, 6, 8, 10}) {
    const fs::path d = ckdir / checkpoint_name(s);
    fs::copy(ck, d);
    CheckpointState st = open_checkpoint(ck);
    st.step = s;
    write_bytes(d / "state.json", state_to_json(st).dump());
  }
  fs::remove(ckdir / "step-000010" / "state.json");
  std::ostringstream log;
  EXPECT_EQ(latest_checkpoint(ckdir, &log), ckdir / "step-000008");
  EXPECT_THAT(log.str(), HasSubstr("passes over " + (ckdir / "step-000010").string() + ": " +
                                   (ckdir / "step-000010").string() + ": not a complete checkpoint"));
  prune_checkpoints(ckdir, 6, 2);  // keeps 6 and the newest older one (4); 8 and 10 are left alone
  std::vector<int64_t> left;
  for (const auto& c : list_checkpoints(ckdir)) left.push_back(c.step);
  EXPECT_EQ(left, (std::vector<int64_t>{4, 6, 8, 10}));
  EXPECT_FALSE(fs::exists(ckdir / "step-000002"));
  prune_checkpoints(ckdir, 8, 1);
  left.clear();
  for (const auto& c : list_checkpoints(ckdir)) left.push_back(c.step);
  EXPECT_EQ(left, (std::vector<int64_t>{8, 10}));
  prune_checkpoints(ckdir, 8, 0);  // 0 keeps every one
  EXPECT_EQ(list_checkpoints(ckdir).size(), 2u);
  // leftovers of killed writers go; a running writer's staging directory stays
  fs::create_directories(ckdir / ".step-000012.oomb-new.999999999");
  fs::create_directories(ckdir / ".step-000006.oomb-old.999999999");
  const fs::path mine = ckdir / fmt::format(".step-000014.oomb-new.{}", ::getpid());
  fs::create_directories(mine);
  remove_stale_checkpoint_files(ckdir);
  EXPECT_FALSE(fs::exists(ckdir / ".step-000012.oomb-new.999999999"));
  EXPECT_FALSE(fs::exists(ckdir / ".step-000006.oomb-old.999999999"));
  EXPECT_TRUE(fs::exists(mine));
  EXPECT_TRUE(fs::exists(ckdir / "step-000008" / "state.json"));
  (void)cfg;
}

}  // namespace
