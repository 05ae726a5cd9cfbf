// oomb train --save-best DIR: the model of the step with the lowest held-out loss so far, saved as
// --out saves, with oomb_best.json; it follows a run that resumes.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "metrics_plan.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
struct BestRun {
  fs::path dir = temp_dir("_save_best");
  std::string d = dir.string();
  BestRun() {
    EXPECT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
    write_tokens(dir / "d.bin", 3000, 128, 1);
    write_tokens(dir / "e.bin", 600, 128, 2);
    write_tokens(dir / "one.bin", 65, 128, 3);  // one window
  }
  std::string train(const std::string& flags) const {
    return fmt::format("train --model {0}/m --data {0}/d.bin --seq-len 64 --chunk-size 32 --page-size 16 --steps 8 "
                       "--warmup-steps 0 --eval-every 1 {1}", d, flags);
  }
  // step (from 1) and loss of the lowest held-out loss in a --metrics file: the first where it ties
  std::pair<int64_t, double> lowest(const std::string& metrics) const {
    std::pair<int64_t, double> best{0, 1e300};
    for (const json& l : metrics_lines(dir / metrics))
      if (l["eval"]["loss"].get<double>() < best.second)
        best = {l["step"].get<int64_t>() + 1, l["eval"]["loss"].get<double>()};  // (--metrics counts from 0)
    return best;
  }
};
json record(const fs::path& p) { return json::parse(read_text(p / "oomb_best.json")); }
}  // namespace

// Held-out data the run overfits away from: the best is an early step's model, not --out's; its
// record is the metrics' lowest, and oomb eval of the saved model gives that loss. Held-out data the
// run trains on: every step is the best so far, and the last one's is --out's.
TEST(SaveBest, TheLowestHeldOutLossesModel) {
  BestRun r;
  const std::string d = r.d;
  CmdResult c = oomb_cmd(r.dir, r.train(fmt::format("--lr 0.01 --eval-data {0}/e.bin --save-best {0}/best --metrics "
                                                    "{0}/a.jsonl --out {0}/last", d)));
  ASSERT_EQ(c.code, 0) << c.out;
  const auto [step, loss] = r.lowest("a.jsonl");
  ASSERT_LT(step, 8) << "the held-out loss was lowest at the last step: the control below needs another";
  EXPECT_EQ(record(r.dir / "best")["step"], step);
  EXPECT_EQ(record(r.dir / "best")["eval_loss"].get<double>(), loss);
  EXPECT_THAT(c.out, HasSubstr(fmt::format("the lowest held-out loss so far ({:.4f}, after step {}): saved {}/best",
                                           loss, step, d)));
  EXPECT_NE(read_text(r.dir / "best/model.safetensors"), read_text(r.dir / "last/model.safetensors"));
  c = oomb_cmd(r.dir, fmt::format("eval --model {0}/best --data {0}/e.bin --seq-len 64 --chunk-size 32 --page-size 16 "
                                  "--buckets 1 --json", d));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NEAR(json::parse(c.out.substr(c.out.find('{')))["loss"].get<double>(), loss, 1e-12);
  // --out into it later: another model, without the record
  c = oomb_cmd(r.dir, fmt::format("train --model {0}/m --data {0}/d.bin --seq-len 64 --chunk-size 32 --steps 1 --out "
                                  "{0}/best", d));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_FALSE(fs::exists(r.dir / "best/oomb_best.json"));

  // one window, trained on at every step and held out: its loss falls at every step
  const std::string one = fmt::format("train --model {0}/m --data {0}/one.bin --seq-len 64 --chunk-size 32 --page-size 16 "
                                      "--warmup-steps 0 --eval-every 1 --lr 0.003 --eval-data {0}/one.bin --save-best "
                                      "{0}/fit ", d);
  c = oomb_cmd(r.dir, one + fmt::format("--steps 8 --metrics {0}/b.jsonl --out {0}/fit_last", d));
  ASSERT_EQ(c.code, 0) << c.out;
  ASSERT_EQ(r.lowest("b.jsonl").first, 8);
  EXPECT_EQ(record(r.dir / "fit")["step"], 8);
  EXPECT_EQ(read_text(r.dir / "fit/model.safetensors"), read_text(r.dir / "fit_last/model.safetensors"));
  // a new run into the same directory starts afresh (the old record is another run's)
  json stale = record(r.dir / "fit");
  stale["eval_loss"] = 0.0;
  write_bytes(r.dir / "fit/oomb_best.json", stale.dump());
  c = oomb_cmd(r.dir, one + "--steps 2");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(record(r.dir / "fit")["step"], 2);
}

// Stopped after every step (--time-limit) and resumed each time, the run saves the best it would
// have saved uninterrupted: the record of a step it has done is kept (the held-out path written as
// DIR/./e.bin in every other run: the same set).
TEST(SaveBest, ResumingKeepsTheBestSoFar) {
  BestRun r;
  const std::string d = r.d;
  const std::string flags = fmt::format("--lr 0.01 --eval-data {}/e.bin --save-best {}/", d, d);
  CmdResult c = oomb_cmd(r.dir, r.train(flags + "whole"));
  ASSERT_EQ(c.code, 0) << c.out;
  int runs = 0;
  do {
    std::string spelled = flags;
    if (runs % 2 == 1) spelled.replace(spelled.find("/e.bin"), 6, "/./e.bin");
    c = oomb_cmd(r.dir, r.train(spelled + fmt::format("cut --checkpoint-dir {}/ck --resume auto --time-limit 0.001s", d)));
    EXPECT_THAT(c.out, ::testing::Not(HasSubstr("of other held-out windows"))) << "run " << runs;
    ASSERT_TRUE(c.code == 0 || c.code == 75) << c.out;
  } while (c.code == 75 && ++runs < 20);
  EXPECT_EQ(runs, 7);  // (8 steps, one a run)
  EXPECT_EQ(record(r.dir / "cut"), record(r.dir / "whole"));
  EXPECT_EQ(read_text(r.dir / "cut/model.safetensors"), read_text(r.dir / "whole/model.safetensors"));
  // another set of held-out windows: the record is not this run's
  c = oomb_cmd(r.dir, r.train(flags + fmt::format("cut --eval-windows 3 --checkpoint-dir {}/ck2 --resume {}/ck/step-000004",
                                                  d, d)));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_THAT(c.out, HasSubstr("oomb_best.json is of other held-out windows; the best is looked for afresh"));
  EXPECT_EQ(record(r.dir / "cut")["step"], 5);
  write_bytes(r.dir / "cut/oomb_best.json", "[1, 2]");
  c = oomb_cmd(r.dir, r.train(flags + fmt::format("cut --checkpoint-dir {}/ck3 --resume {}/ck/step-000004", d, d)));
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--save-best: " + d + "/cut/oomb_best.json is not oomb's record of a best model"));
}
