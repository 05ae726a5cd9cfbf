// oomb train --eval-data: the held-out loss during training. It is the loss `oomb eval` gives the
// saved model on the same windows; it comes after the steps --eval-every names and the last, in
// the progress line, --metrics and --tensorboard; it does not change the training (the same
// losses with and without it), and with --offload params (the update beside the next step) it
// sees each step's weights as the resident run does.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "backend/backend.h"
#include "data/token_source.h"
#include "model/param_store.h"
#include "model_fixture.h"
#include "tensorboard_reader.h"
#include "test_util.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "train/trainer.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

std::vector<nlohmann::json> lines(const fs::path& p) {
  std::vector<nlohmann::json> v;
  std::istringstream in(read_text(p));
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) v.push_back(nlohmann::json::parse(l));
  return v;
}

struct Runs {
  fs::path dir;
  std::string train;  // oomb train's flags but --metrics
  Runs() : dir(temp_dir()) {
    EXPECT_EQ(oomb_cmd(dir, "init --out " + (dir / "m").string()).code, 0);
    write_tokens(dir / "t.bin", 2000, 128, 1);
    write_tokens(dir / "e.bin", 700, 128, 2);
    train = fmt::format("train --model {} --data {} --seq-len 128 --chunk-size 32 --steps 4 --lr 1e-2 ",
                        (dir / "m").string(), (dir / "t.bin").string());
  }
  std::vector<nlohmann::json> metrics(const std::string& flags, const std::string& name) {
    const CmdResult r = oomb_cmd(dir, train + flags + " --metrics " + (dir / name).string());
    EXPECT_EQ(r.code, 0) << flags << ": " << r.out;
    return lines(dir / name);
  }
};

}  // namespace

// After steps 2 and 4 of 4 (--eval-every 2), every whole window of the held-out data (5 of 128
// tokens in 700): the last equals `oomb eval` of the saved model (the chunk sizes' fp32 sums
// aside), the two differ (the weights moved), the other steps' lines have none; the progress line
// and TensorBoard's eval/ scalars carry the same figures.
TEST(TrainEval, HeldOutLossIsTheSavedModelsLoss) {
  Runs r;
  const std::string out = (r.dir / "out").string(), tb = (r.dir / "tb").string();
  const CmdResult t = oomb_cmd(r.dir, r.train + fmt::format("--eval-data {} --eval-every 2 --out {} --tensorboard {} "
                                                            "--metrics {}", (r.dir / "e.bin").string(), out, tb,
                                                            (r.dir / "m.jsonl").string()));
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_THAT(t.out, HasSubstr("held-out loss: "));
  EXPECT_THAT(t.out, HasSubstr("5 windows of 128 tokens, every 2 steps and after the last"));
  const auto m = lines(r.dir / "m.jsonl");
  ASSERT_EQ(m.size(), 4u);
  EXPECT_FALSE(m[0].contains("eval"));
  EXPECT_FALSE(m[2].contains("eval"));
  ASSERT_TRUE(m[1].contains("eval") && m[3].contains("eval"));
  EXPECT_EQ(m[3]["eval"]["windows"], 5);
  EXPECT_EQ(m[3]["eval"]["targets"], 5 * 128);
  const double after2 = m[1]["eval"]["loss"], after4 = m[3]["eval"]["loss"];
  EXPECT_NE(after2, after4);
  EXPECT_THAT(t.out, HasSubstr(fmt::format("eval after step 4: loss {:.4f}", after4)));
  const CmdResult e = oomb_cmd(r.dir, fmt::format("eval --model {} --data {} --seq-len 128 --chunk-size 32 --windows 5 "
                                                  "--json", out, (r.dir / "e.bin").string()));
  ASSERT_EQ(e.code, 0) << e.out;
  const nlohmann::json ej = nlohmann::json::parse(e.out.substr(e.out.find('{')));
  EXPECT_NEAR(ej["loss"].get<double>(), after4, 1e-7 * after4);
  EXPECT_EQ(ej["targets"], m[3]["eval"]["targets"]);
  std::map<int64_t, float> tb_loss;
  for (const auto& f : fs::directory_iterator(tb))
    for (const TbEvent& ev : read_events(read_text(f.path())))
      if (ev.scalars.count("eval/loss")) tb_loss[ev.step] = ev.scalars.at("eval/loss");
  EXPECT_EQ(tb_loss, (std::map<int64_t, float>{{1, float(after2)}, {3, float(after4)}}));
}

// Evaluating changes nothing in the training (the same losses and gradient norms with and without
// it), and with --offload params on the simulated device, whose update runs beside the next step's
// first layers, the held-out losses are the resident run's bit for bit (each evaluation waits for
// the update it reads).
TEST(TrainEval, ChangesNoStepAndSeesTheOverlappedUpdate) {
  Runs r;
  const std::string eval = fmt::format(" --eval-data {} --eval-every 1 --eval-windows 2", (r.dir / "e.bin").string());
  const auto plain = r.metrics("--device sim", "plain.jsonl"), with = r.metrics("--device sim" + eval, "with.jsonl"),
             offloaded = r.metrics("--device sim --offload params" + eval, "off.jsonl");
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_EQ(with.size(), 4u);
  ASSERT_EQ(offloaded.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(with[k]["loss"], plain[k]["loss"]);
    EXPECT_EQ(with[k]["grad_norm"], plain[k]["grad_norm"]);
    EXPECT_EQ(offloaded[k]["loss"], with[k]["loss"]);
    ASSERT_TRUE(with[k].contains("eval") && offloaded[k].contains("eval"));
    EXPECT_EQ(offloaded[k]["eval"]["loss"], with[k]["eval"]["loss"]);
    EXPECT_EQ(with[k]["eval"]["windows"], 2);
  }
  EXPECT_NE(with[0]["eval"]["loss"], with[3]["eval"]["loss"]);
}

namespace {
// Window w: step_tokens(N + 1, w) (a TokenSource for train() itself)
class Windows final : public TokenSource {
 public:
  Windows(int64_t vocab, uint64_t seed) : vocab_(vocab), seed_(seed) {}
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override {
    const std::vector<int32_t> t = step_tokens(N + 1, seed_ + uint64_t(w), vocab_);
    std::copy(t.begin() + t0, t.begin() + t0 + n, ids);
    std::copy(t.begin() + t0 + 1, t.begin() + t0 + n + 1, targets);
  }
  std::string describe() const override { return "test windows"; }

 private:
  int64_t vocab_;
  uint64_t seed_;
};

// The held-out losses of 3 AdamW steps on the simulated device, each step's update slowed to 20 ms a
// unit (with --offload params it runs beside the next pass: the evaluation's)
std::vector<double> held_out_losses(const fs::path& dir, bool offload) {
  const ModelConfig cfg = load_config(dir);
  auto sim = make_sim_backend(0, 100);
  ChunkPlan plan{16, 8};
  plan.offload_params = offload;
  Model m(cfg, *sim, plan);
  load_for_training(m, dir);
  Windows data(cfg.vocab, 1), held_out(cfg.vocab, 100);
  TrainOptions o{40, 3, 1, 100};
  o.optim.lr = 1e-2f;
  o.eval_data = &held_out;
  o.eval_every = 1;
  o.eval_windows = 2;
  std::vector<double> v;
  std::ostringstream log;
  Optimizer::delay_update_for_test(20000);
  train(m, data, o, log, [&](const StepStats& st) { v.push_back(st.evaluated ? st.eval_loss : -1.0); });
  Optimizer::delay_update_for_test(0);
  return v;
}
}  // namespace

// The trainer itself, the update slowed: with --offload params each evaluation waits for the
// layers' update beside it and gets the resident run's losses bit for bit; without the layers' wait
// (the control) it reads weights the update has not reached.
TEST(TrainEval, WaitsForTheUpdateBesideIt) {
  const auto dir = temp_dir("_train_eval_update");
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 3);
  const std::vector<double> resident = held_out_losses(dir, false), offloaded = held_out_losses(dir, true);
  ASSERT_EQ(resident.size(), 3u);
  EXPECT_EQ(offloaded, resident);
  if (tsan_leaves_out("the evaluation without the param store's update wait")) return;
  ParamStore::drop_wait_for_test("update-layer");
  const std::vector<double> early = held_out_losses(dir, true);
  ParamStore::drop_wait_for_test(nullptr);
  EXPECT_NE(early, resident) << "without the layers' update wait the evaluation still read updated weights";
}

// Bad input is named: the evaluation flags without --eval-data, a held-out file that is not there,
// --eval-data where an output goes.
TEST(TrainEval, BadInputIsNamed) {
  Runs r;
  EXPECT_THAT(oomb_cmd(r.dir, r.train + "--eval-every 2").out, HasSubstr("--eval-every requires --eval-data"));
  EXPECT_THAT(oomb_cmd(r.dir, r.train + "--eval-windows 2").out, HasSubstr("--eval-windows requires --eval-data"));
  const CmdResult missing = oomb_cmd(r.dir, r.train + "--eval-data " + (r.dir / "nope.bin").string());
  EXPECT_NE(missing.code, 0);
  EXPECT_THAT(missing.out, HasSubstr("nope.bin"));
  const CmdResult same = oomb_cmd(r.dir, r.train + fmt::format("--eval-data {} --metrics {}", (r.dir / "e.bin").string(),
                                                               (r.dir / "e.bin").string()));
  EXPECT_NE(same.code, 0);
  EXPECT_THAT(same.out, HasSubstr("--eval-data"));
}
