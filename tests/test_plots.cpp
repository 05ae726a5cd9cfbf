// The plotting tools draw what oomb writes: tools/plot_run.py an `oomb train --metrics` file (loss
// and memory PNGs), tools/plot_eval.py an `oomb eval --out` file (loss by position, and the
// passkey heat map); a bad file is an error naming it and the line. Needs matplotlib
// (python3-matplotlib, scripts/install-deps.sh): a skip saying so without it, a failure under CI.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cstdlib>
#include <filesystem>

#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
namespace fs = std::filesystem;

namespace {

// What python3 tools/NAME args printed, and its exit code.
CmdResult tool(const fs::path& dir, const std::string& name, const std::string& args) {
  const fs::path log = dir / (name + ".log");
  const std::string cmd = fmt::format("{} {}/tools/{} {} > {} 2>&1", torch_python(), source_dir().string(), name, args,
                                      log.string());
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_text(log)};
}

// A PNG file: the signature, and more than a header's worth of picture.
void expect_png(const fs::path& p) {
  ASSERT_TRUE(fs::exists(p)) << p;
  const std::string s = read_text(p);
  EXPECT_EQ(s.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << p;
  EXPECT_GT(s.size(), 5000u) << p;
}

TEST(Plots, TrainMetricsAndEvalResultsDrawAsPngs) {
  const auto dir = temp_dir();
  {
    const CmdResult probe = tool(dir, "plot_run.py", "--help");
    if (probe.code != 0) OOMB_MISSING_REFERENCE("tools/plot_run.py does not start (matplotlib?): " + probe.out);
  }
  const CmdResult tr = oomb_cmd(dir, fmt::format("train --seq-len 64 --chunk-size 32 --steps 4 --log-every 1 "
                                                 "--metrics {} --out {}", (dir / "run.jsonl").string(),
                                                 (dir / "m").string()));
  ASSERT_EQ(tr.code, 0) << tr.out;
  const CmdResult pr = tool(dir, "plot_run.py", fmt::format("{} -o {}", (dir / "run.jsonl").string(),
                                                             (dir / "run").string()));
  EXPECT_EQ(pr.code, 0) << pr.out;
  expect_png(dir / "run-loss.png");
  expect_png(dir / "run-memory.png");

  write_tokens(dir / "held.bin", 4 * 64 + 1, 128, 5);
  const CmdResult ev = oomb_cmd(dir, fmt::format("eval --model {} --data {} --data-format u32 --seq-len 64 --buckets 4 "
                                                 "--out {}", (dir / "m").string(), (dir / "held.bin").string(),
                                                 (dir / "eval.json").string()));
  ASSERT_EQ(ev.code, 0) << ev.out;
  write_tokens(dir / "held2.bin", 2 * 64 + 1, 128, 6);  // two held-out sets: a line each
  const CmdResult sets = oomb_cmd(dir, fmt::format("eval --model {} --data {} --data {} --data-format u32 --seq-len 64 "
                                                   "--buckets 4 --out {}", (dir / "m").string(),
                                                   (dir / "held.bin").string(), (dir / "held2.bin").string(),
                                                   (dir / "sets.json").string()));
  ASSERT_EQ(sets.code, 0) << sets.out;
  const CmdResult pk = oomb_cmd(dir, fmt::format("eval --model {} --passkey --lengths 32,48 --depths 0,1 --trials 2 "
                                                 "--digits 2 --out {}", (dir / "m").string(),
                                                 (dir / "passkey.json").string()));
  ASSERT_EQ(pk.code, 0) << pk.out;
  for (const char* name : {"eval", "sets", "passkey"}) {
    const CmdResult pe = tool(dir, "plot_eval.py", fmt::format("{} -o {}", (dir / (std::string(name) + ".json")).string(),
                                                                (dir / (std::string(name) + ".png")).string()));
    EXPECT_EQ(pe.code, 0) << name << ": " << pe.out;
    expect_png(dir / (std::string(name) + ".png"));
    if (std::string(name) == "sets") {  // a line per held-out set
      EXPECT_THAT(pe.out, ::testing::HasSubstr(fmt::format("(lines: {0}/m: held.bin; {0}/m: held2.bin)", dir.string())));
    }
  }

  write_bytes(dir / "bad.jsonl", "{\"step\": 0}\n{not json\n");
  const CmdResult bad = tool(dir, "plot_run.py", (dir / "bad.jsonl").string());
  EXPECT_NE(bad.code, 0);
  EXPECT_THAT(bad.out, ::testing::HasSubstr("bad.jsonl line 2"));
}

}  // namespace
