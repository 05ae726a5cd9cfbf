// oomb train --time-limit: the run stops at a step's end, writing a checkpoint, where another step
// and a checkpoint would pass the limit, and exits 75 (run it again); resumed, it is the
// uninterrupted run bit for bit.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/train_checkpoints.h"
#include "metrics_plan.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb::testing;
using oomb::cli::parse_duration;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(TimeLimit, DurationsReadAsWritten) {
  EXPECT_EQ(parse_duration("90", "--time-limit"), 90);
  EXPECT_EQ(parse_duration("90s", "--time-limit"), 90);
  EXPECT_EQ(parse_duration("45m", "--time-limit"), 2700);
  EXPECT_EQ(parse_duration("3h50m", "--time-limit"), 3 * 3600 + 50 * 60);
  EXPECT_EQ(parse_duration("1d2h30m15s", "--time-limit"), 86400 + 7200 + 1800 + 15);
  EXPECT_EQ(parse_duration("2.5m", "--time-limit"), 150);
  for (const char* bad : {"", "abc", "5x", "1h30", "0", "0s", "h", "1..5m", "1h1h", "1m1h", "-5"})
    EXPECT_THAT(error_of([&] { parse_duration(bad, "--time-limit"); }), HasSubstr(fmt::format("--time-limit '{}'", bad)))
        << bad;
}

TEST(TimeLimit, StopsWithACheckpointAndResumesAsTheWholeRun) {
  const fs::path dir = temp_dir("_time_limit");
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_tokens(dir / "d.bin", 3000, 128, 4);
  const std::string train = fmt::format("train --model {0}/m --data {0}/d.bin --seq-len 64 --chunk-size 32 "
                                        "--page-size 16 --lr 0.01 --steps 4", d);
  CmdResult r = oomb_cmd(dir, train + fmt::format(" --metrics {0}/whole.jsonl --out {0}/whole", d));
  ASSERT_EQ(r.code, 0) << r.out;
  // a limit the first step passes: one step, a checkpoint, exit status 75
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {0}/ck --time-limit 0.001s --metrics {0}/cut.jsonl "
                                        "--out {0}/cut", d));
  EXPECT_EQ(r.code, 75) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--time-limit 0.001s (0 s) would pass before another step and checkpoint"));
  EXPECT_THAT(r.out, HasSubstr("stopped after step 1/4"));
  EXPECT_TRUE(fs::exists(dir / "ck/step-000001/state.json"));
  EXPECT_FALSE(fs::exists(dir / "cut"));  // (--out only at the end)
  // again with --resume auto and a limit it never reaches: the rest, as the whole run
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {0}/ck --resume auto --time-limit 2h --metrics "
                                        "{0}/cut.jsonl --out {0}/cut", d));
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<double> whole, cut;
  for (const nlohmann::json& l : metrics_lines(dir / "whole.jsonl")) whole.push_back(l["loss"].get<double>());
  for (const nlohmann::json& l : metrics_lines(dir / "cut.jsonl")) cut.push_back(l["loss"].get<double>());
  EXPECT_EQ(cut, whole);
  EXPECT_EQ(read_text(dir / "cut/model.safetensors"), read_text(dir / "whole/model.safetensors"));
  r = oomb_cmd(dir, train + " --time-limit 1h");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--time-limit requires --checkpoint-dir"));
}
