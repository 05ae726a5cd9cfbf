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
#include "metrics_plan.h"
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
    return metrics_lines(dir / name);
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
  const auto m = metrics_lines(r.dir / "m.jsonl");
  ASSERT_EQ(m.size(), 4u);
  EXPECT_FALSE(m[0].contains("eval"));
  EXPECT_FALSE(m[2].contains("eval"));
  ASSERT_TRUE(m[1].contains("eval") && m[3].contains("eval"));
  EXPECT_EQ(m[3]["eval"]["windows"], 5);
  EXPECT_EQ(m[3]["eval"]["targets"], 5 * 128);
  const double after2 = m[1]["eval"]["loss"], after4 = m[3]["eval"]["loss"];
  EXPECT_NE(after2, after4);
  EXPECT_THAT(t.out, HasSubstr(fmt::format("eval after step 4: loss {:.4f}", after4)));
  // (--buckets 4: chunks of 32, as the training's)
  const CmdResult e = oomb_cmd(r.dir, fmt::format("eval --model {} --data {} --seq-len 128 --chunk-size 32 --buckets 4 "
                                                  "--windows 5 --json", out, (r.dir / "e.bin").string()));
  ASSERT_EQ(e.code, 0) << e.out;
  const nlohmann::json ej = nlohmann::json::parse(e.out.substr(e.out.find('{')));
  EXPECT_EQ(ej["loss"].get<double>(), after4);
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
// the update it reads); the step's own figures leave the evaluation out (moved: the same bytes as
// without it), and the evaluation reports what it moved.
TEST(TrainEval, ChangesNoStepAndSeesTheOverlappedUpdate) {
  Runs r;
  const std::string eval = fmt::format(" --eval-data {} --eval-every 1 --eval-windows 2", (r.dir / "e.bin").string());
  const auto plain = r.metrics("--device sim", "plain.jsonl"), with = r.metrics("--device sim" + eval, "with.jsonl"),
             offloaded = r.metrics("--device sim --offload params" + eval, "off.jsonl"),
             off_plain = r.metrics("--device sim --offload params", "off_plain.jsonl");
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
    EXPECT_EQ(offloaded[k]["moved"], off_plain[k]["moved"]);
    EXPECT_GT(offloaded[k]["eval"]["moved"]["weights"].get<int64_t>(), 0);
    EXPECT_TRUE(offloaded[k]["eval"].contains("update_waited_s"));
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

struct HeldOut {
  std::vector<double> losses;  // after each step
  int64_t image_casts = 0;     // the param store's casts of every bf16 image at once
};
// The held-out losses of 3 AdamW steps of 2 windows on the simulated device (evaluations of 3
// windows: with `evaluate`), each step's update slowed to 20 ms a unit (with --offload params it
// runs beside the next pass: the evaluation's)
HeldOut held_out_losses(const fs::path& dir, bool offload, DType precision = DType::F32, bool evaluate = true) {
  const ModelConfig cfg = load_config(dir);
  auto sim = make_sim_backend(0, 100);
  ChunkPlan plan{16, 8};
  plan.offload_params = offload;
  plan.precision = precision;
  Model m(cfg, *sim, plan);
  load_for_training(m, dir);
  Windows data(cfg.vocab, 1), held_out(cfg.vocab, 100);
  TrainOptions o{40, 3, 2, 100};
  o.optim.lr = 1e-2f;
  o.eval_data = evaluate ? &held_out : nullptr;
  o.eval_every = 1;
  o.eval_windows = 3;
  HeldOut r;
  std::ostringstream log;
  struct Slow {
    Slow() { Optimizer::delay_update_for_test(20000); }
    ~Slow() { Optimizer::delay_update_for_test(0); }
  } slow;
  train(m, data, o, log, [&](const StepStats& st) { r.losses.push_back(st.evaluated ? st.eval_loss : -1.0); });
  r.image_casts = m.store().image_casts();
  return r;
}
}  // namespace

// The trainer itself, the update slowed: with --offload params each evaluation waits for the
// layers' update beside it and gets the resident run's losses bit for bit (fp32 and bf16); without
// the layers' wait (the control) it reads weights the update has not reached. Under bf16 the
// evaluation's windows and the next step's second window read the images the update cast (no
// cast of every image: as many as without evaluating).
TEST(TrainEval, WaitsForTheUpdateBesideIt) {
  const auto dir = temp_dir("_train_eval_update");
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 3);
  for (const DType precision : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(precision));
    const HeldOut resident = held_out_losses(dir, false, precision), offloaded = held_out_losses(dir, true, precision);
    ASSERT_EQ(resident.losses.size(), 3u);
    EXPECT_EQ(offloaded.losses, resident.losses);
    if (precision == DType::BF16) {
      EXPECT_EQ(offloaded.image_casts, held_out_losses(dir, true, precision, false).image_casts);
      EXPECT_EQ(offloaded.image_casts, 2) << "(the first step's two windows, before any update; the updates cast "
                                             "the rest)";
    }
  }
  HeldOut early;
  {
    struct Early {  // (each unit once the pass waits for one at or after it)
      Early() { ParamStore::drop_wait_for_test("update-layer"), Optimizer::hold_update_for_test(true); }
      ~Early() { ParamStore::drop_wait_for_test(nullptr), Optimizer::hold_update_for_test(false); }
    } early_reads;
    early = held_out_losses(dir, true);
  }
  EXPECT_NE(early.losses, held_out_losses(dir, false).losses)
      << "without the layers' update wait the evaluation still read updated weights";
}

// Bad input is named: the evaluation flags without --eval-data, --eval-data in the demo, a
// held-out file that is not there, --eval-data where an output goes.
TEST(TrainEval, BadInputIsNamed) {
  Runs r;
  EXPECT_THAT(oomb_cmd(r.dir, r.train + "--eval-every 2").out, HasSubstr("--eval-every requires --eval-data"));
  EXPECT_THAT(oomb_cmd(r.dir, r.train + "--eval-windows 2").out, HasSubstr("--eval-windows requires --eval-data"));
  EXPECT_THAT(oomb_cmd(r.dir, "train --steps 1 --eval-data " + (r.dir / "e.bin").string()).out,
              HasSubstr("--eval-data needs --model and --data"));
  const CmdResult missing = oomb_cmd(r.dir, r.train + "--eval-data " + (r.dir / "nope.bin").string());
  EXPECT_NE(missing.code, 0);
  EXPECT_THAT(missing.out, HasSubstr("nope.bin"));
  const CmdResult same = oomb_cmd(r.dir, r.train + fmt::format("--eval-data {} --metrics {}", (r.dir / "e.bin").string(),
                                                               (r.dir / "e.bin").string()));
  EXPECT_NE(same.code, 0);
  EXPECT_THAT(same.out, HasSubstr("--eval-data"));
}
