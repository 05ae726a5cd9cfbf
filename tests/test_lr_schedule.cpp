// oomb train's learning-rate schedules (--lr-schedule, --min-lr-ratio, --decay-steps): each step's
// lr as the formulas give it, in --metrics; checkpoints record the schedule; a warmup-stable-decay
// run's checkpoint from its stable phase continues as a longer run, bit for bit that run.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "metrics_plan.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

struct ScheduleRun {
  fs::path dir;
  std::string d;
  explicit ScheduleRun(const std::string& hint) : dir(temp_dir(hint)), d(dir.string()) {
    EXPECT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
    write_tokens(dir / "d.bin", 3000, 128, 9);
  }
  CmdResult train(const std::string& flags) const {
    return oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/d.bin --seq-len 64 --chunk-size 32 --page-size 16 "
                                     "--lr 0.01 {1}", d, flags));
  }
  std::vector<double> field(const std::string& metrics, const char* key) const {
    std::vector<double> v;
    for (const nlohmann::json& l : metrics_lines(dir / metrics)) v.push_back(l[key].get<double>());
    return v;
  }
};

}  // namespace

// --metrics' lr of each step is the schedule's, from its formulas written out here (the step's lr as
// a float, as the optimizer takes it).
TEST(LrSchedule, EachStepsLrIsTheSchedules) {
  ScheduleRun r("_lr_schedule");
  const double lr = float(0.01), floor = float(0.01) * double(0.2f);
  struct Case {
    std::string flags;
    std::vector<double> want;  // steps 0..7, warmup 2
  };
  std::vector<Case> cases = {
      {"--lr-schedule constant", {}},
      {"--lr-schedule linear --min-lr-ratio 0.2", {}},
      {"--lr-schedule wsd --min-lr-ratio 0.2 --decay-steps 3", {}},
  };
  for (int64_t k = 0; k < 8; ++k) {
    const double warm = k < 2 ? double(float(0.01) * float(k + 1) / 2.0f) : -1;
    cases[0].want.push_back(warm >= 0 ? warm : lr);
    cases[1].want.push_back(warm >= 0 ? warm : floor + (lr - floor) * (1.0 - double(k - 2) / 5.0));
    cases[2].want.push_back(warm >= 0 ? warm : k < 5 ? lr : floor + (lr - floor) * (1.0 - double(k - 4) / 3.0));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const CmdResult c = r.train(fmt::format("--steps 8 --warmup-steps 2 {} --metrics {}/m{}.jsonl", cases[i].flags,
                                            r.d, i));
    ASSERT_EQ(c.code, 0) << c.out;
    const std::vector<double> got = r.field(fmt::format("m{}.jsonl", i), "lr");
    ASSERT_EQ(got.size(), 8u);
    for (size_t k = 0; k < 8; ++k) EXPECT_NEAR(got[k], cases[i].want[k], 1e-9) << cases[i].flags << ", step " << k;
  }
  const CmdResult c = r.train("--steps 8 --warmup-steps 7 --lr-schedule wsd --decay-steps 2");
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--decay-steps 2: more than the 1 steps after the warmup"));
}

// A wsd checkpoint of the stable phase continues with more --steps (and another --decay-steps): the
// losses and weights are those of the longer run from the start. One taken in the decay is refused,
// naming --steps; so is another schedule.
TEST(LrSchedule, AStablePhaseCheckpointContinuesLonger) {
  ScheduleRun r("_lr_wsd_resume");
  const std::string d = r.d;
  CmdResult c = r.train(fmt::format("--steps 6 --warmup-steps 1 --lr-schedule wsd --decay-steps 2 --checkpoint-dir "
                                    "{}/ck --save-every 1", d));
  ASSERT_EQ(c.code, 0) << c.out;
  c = r.train(fmt::format("--steps 10 --warmup-steps 1 --lr-schedule wsd --decay-steps 3 --metrics {}/long.jsonl "
                          "--out {}/long", d, d));
  ASSERT_EQ(c.code, 0) << c.out;
  // step-000004: steps 0-3 done, all at the peak in both (step 4, next, was the 6-step run's first of its decay)
  c = r.train(fmt::format("--steps 10 --warmup-steps 1 --lr-schedule wsd --decay-steps 3 --resume {}/ck/step-000004 "
                          "--metrics {}/cont.jsonl --out {}/cont", d, d, d));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_THAT(c.out, HasSubstr("its 4 steps done had the lr this schedule gives them, so it continues as --lr-schedule "
                               "wsd over 10 steps, decaying over the last 3 (it was --lr-schedule wsd over 6, decaying "
                               "over the last 2)"));
  const std::vector<double> long_loss = r.field("long.jsonl", "loss"), cont = r.field("cont.jsonl", "loss");
  ASSERT_EQ(long_loss.size(), 10u);
  ASSERT_EQ(cont.size(), 6u);
  EXPECT_EQ(cont, std::vector<double>(long_loss.begin() + 4, long_loss.end()));
  EXPECT_EQ(read_text(r.dir / "cont/model.safetensors"), read_text(r.dir / "long/model.safetensors"));
  // step-000005: step 4, done, was the 6-step run's first decaying one
  c = r.train(fmt::format("--steps 10 --warmup-steps 1 --lr-schedule wsd --decay-steps 3 --resume {}/ck/step-000005", d));
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--steps is 10 here but 6 in the checkpoint"));
  c = r.train(fmt::format("--steps 10 --warmup-steps 1 --resume {}/ck/step-000004", d));
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--lr-schedule is cosine (the default) here but wsd in the checkpoint"));
}

// wsd branching off a constant run: its checkpoint continues as the wsd run from the start.
TEST(LrSchedule, AConstantRunBranchesIntoADecay) {
  ScheduleRun r("_lr_branch");
  const std::string d = r.d;
  CmdResult c = r.train(fmt::format("--steps 6 --warmup-steps 1 --lr-schedule constant --checkpoint-dir {}/ck "
                                    "--save-every 3", d));
  ASSERT_EQ(c.code, 0) << c.out;
  const std::string wsd = "--steps 8 --warmup-steps 1 --lr-schedule wsd --decay-steps 2";
  c = r.train(fmt::format("{} --metrics {}/fresh.jsonl", wsd, d));
  ASSERT_EQ(c.code, 0) << c.out;
  c = r.train(fmt::format("{} --resume {}/ck/step-000006 --metrics {}/branch.jsonl", wsd, d, d));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_THAT(c.out, HasSubstr("(it was --lr-schedule constant over 6)"));
  const std::vector<double> fresh = r.field("fresh.jsonl", "loss"), branch = r.field("branch.jsonl", "loss");
  ASSERT_EQ(fresh.size(), 8u);
  ASSERT_EQ(branch.size(), 2u);
  EXPECT_EQ(branch, std::vector<double>(fresh.begin() + 6, fresh.end()));
  const std::vector<double> fresh_lr = r.field("fresh.jsonl", "lr");
  EXPECT_EQ(r.field("branch.jsonl", "lr"), std::vector<double>(fresh_lr.begin() + 6, fresh_lr.end()));
}
