// `--keep-attention` through the command line: oomb train gives every step's loss and gradient norm
// bit for bit with and without it, on the CPU and the simulated device (pages resident and
// offloaded), and what it holds more is every layer's (N, H, D) attention output and (N, H) LSE in
// fp32, less the (C, H, D) and (C, H) of one chunk that the layers work in without it (with it
// they work in the store's rows): measured, and as `oomb plan --keep-attention` says (its table,
// and the line naming the cost and the passes); and without it, oomb train says when keeping would fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <regex>
#include <sstream>

#include "core/memory.h"
#include "hf/config.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

// The tiny preset in dir/m and 2000 tokens of its vocabulary in dir/t.bin.
struct TinyRun {
  std::filesystem::path dir = temp_dir();
  std::string m = (dir / "m").string();
  ModelConfig cfg;
  TinyRun() {
    EXPECT_EQ(oomb_cmd(dir, "init --preset tiny --out " + m).code, 0);
    cfg = load_config(m);
    write_tokens(dir / "t.bin", 2000, cfg.vocab, 5);
  }
};

}  // namespace

TEST(CliKeepAttention, TrainGivesTheSameStepsAndHoldsWhatThePlanSays) {
  const TinyRun run;
  const auto& dir = run.dir;
  const std::string& m = run.m;
  const ModelConfig& cfg = run.cfg;
  const int64_t N = 256, C = 64, L = cfg.layers, H = cfg.heads, D = cfg.head_dim;
  const int64_t more = L * (N - C) * H * (D + 1) * 4;  // (fp32, the default on cpu and sim)
  for (const char* where : {"--device cpu", "--device sim", "--device sim --offload kv"}) {
    const std::string tier = std::string(where) == "--device cpu" ? "host" : "device";
    std::vector<std::string> steps[2];
    int64_t activations[2] = {0, 0};
    for (const bool keep : {false, true}) {
      SCOPED_TRACE(fmt::format("{} keep={}", where, keep));
      const std::string flags = fmt::format("--seq-len {} --chunk-size {} {}{}", N, C, where, keep ? " --keep-attention" : "");
      const auto metrics = dir / fmt::format("m{}.jsonl", keep);
      const CmdResult r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --steps 2 --optimizer adamw {} "
                                                    "--metrics {}", m, dir.string(), flags, metrics.string()));
      ASSERT_EQ(r.code, 0) << r.out;
      std::string line;
      for (std::istringstream in(read_text(metrics)); std::getline(in, line);) {
        if (line.empty()) continue;
        const auto j = nlohmann::json::parse(line);
        steps[keep].push_back(fmt::format("{}: loss {:a} grad_norm {:a}", j["step"].get<int>(), j["loss"].get<double>(),
                                          j["grad_norm"].get<double>()));
        activations[keep] = j["memory"][tier]["activations"]["peak"].get<int64_t>();
      }
      // the plan of the same run: the measured activations, and the line naming the cost
      const CmdResult p = oomb_cmd(dir, fmt::format("plan --model {} --optimizer adamw {} --json", m, flags));
      ASSERT_EQ(p.code, 0) << p.out;
      EXPECT_EQ(nlohmann::json::parse(p.out)[tier]["activations"].get<int64_t>(), activations[keep]);
      if (keep) {
        const CmdResult t = oomb_cmd(dir, fmt::format("plan --model {} {}", m, flags));
        ASSERT_EQ(t.code, 0) << t.out;
        EXPECT_THAT(t.out, HasSubstr(fmt::format("--keep-attention: {} more {} activations", format_bytes(more), tier)));
        EXPECT_THAT(t.out, HasSubstr(fmt::format("for {} attention forward passes a step instead of {}, beside the {} "
                                                 "backward", L, 2 * L - 1, L)));
      }
    }
    ASSERT_EQ(steps[0].size(), 2u) << where;
    EXPECT_EQ(steps[0], steps[1]) << where;
    EXPECT_EQ(activations[1] - activations[0], more) << where;
  }
}

// Without the flag, oomb train and oomb plan --device-memory say when keeping would fit the device
// (--device-memory on sim) and what it saves, with the device bytes its plan gives; not when only the
// run without it fits. With it on a device too small, the refusal names what the run needs without it.
TEST(CliKeepAttention, TrainAndPlanSayWhenKeepingWouldFit) {
  const TinyRun run;
  const auto& dir = run.dir;
  const std::string& m = run.m;
  const ModelConfig& cfg = run.cfg;
  const std::string flags = "--seq-len 256 --chunk-size 64 --device sim --optimizer adamw";
  auto device_need = [&](const std::string& more) -> int64_t {
    const CmdResult p = oomb_cmd(dir, fmt::format("plan --model {} {} --json{}", m, flags, more));
    EXPECT_EQ(p.code, 0) << p.out;
    return p.code == 0 ? nlohmann::json::parse(p.out)["device"]["total"].get<int64_t>() : 0;
  };
  const int64_t without = device_need(""), with = device_need(" --keep-attention");
  ASSERT_LT(without, with);
  const std::string train = fmt::format("train --model {} --data {}/t.bin --steps 1 {}", m, dir.string(), flags);
  CmdResult r = oomb_cmd(dir, train + fmt::format(" --device-memory {}", with));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--keep-attention would fit (device {}, of --device-memory {}): {} attention "
                                           "forward passes a step instead of {}, the same bits",
                                           format_bytes(with), format_bytes(with), cfg.layers, 2 * cfg.layers - 1)));
  r = oomb_cmd(dir, train + fmt::format(" --device-memory {}", with - 1));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("--keep-attention would fit")));
  r = oomb_cmd(dir, train + fmt::format(" --device-memory {} --keep-attention", with));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("--keep-attention would fit")));
  for (const int64_t device : {with, with - 1}) {
    const CmdResult p = oomb_cmd(dir, fmt::format("plan --model {} {} --device-memory {} --host-memory {}", m, flags,
                                                  device, int64_t(1) << 40));
    ASSERT_EQ(p.code, 0) << p.out;
    const std::string line = fmt::format("--keep-attention fits too (device {}): {} attention forward passes a step "
                                         "instead of {}", format_bytes(with), cfg.layers, 2 * cfg.layers - 1);
    if (device == with) EXPECT_THAT(p.out, HasSubstr(line));
    else EXPECT_THAT(p.out, ::testing::Not(HasSubstr("--keep-attention fits too")));
  }
  // a device between the two: refused with the flag, naming what the run needs without it
  r = oomb_cmd(dir, train + fmt::format(" --device-memory {} --keep-attention", (with + without) / 2));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("without --keep-attention it needs device {}, host and pinned",
                                           format_bytes(without))));
}

// oomb plan's device memory per token (printed with --sparse-pages, from the plans at N and 2N)
// counts the store's growth: every layer's (H, D) output and (H) LSE of one more token, fp32 on sim.
TEST(CliKeepAttention, PlanPerTokenCountsTheStore) {
  const TinyRun run;
  const ModelConfig& cfg = run.cfg;
  auto per_token = [&](const std::string& more) {
    const CmdResult p = oomb_cmd(run.dir, fmt::format("plan --model {} --seq-len 1024 --chunk-size 64 --device sim "
                                                      "--sparse-pages 2 --sparse-tile 64{}", run.m, more));
    EXPECT_EQ(p.code, 0) << p.out;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(p.out, m, std::regex("device memory per token: ([0-9.]+) B"))) << p.out;
    return m.empty() ? -1.0 : std::stod(m[1]);
  };
  const double without = per_token(""), with = per_token(" --keep-attention");
  ASSERT_GT(without, 0);
  EXPECT_NEAR(with - without, double(cfg.layers * cfg.heads * (cfg.head_dim + 1) * 4), 0.1);
}

// --offload attention through the command line: oomb train gives --keep-attention's steps bit for
// bit; what it holds (device and pinned activations) is what oomb plan says, the store in pinned
// memory and two chunks' rows on the device; --metrics' moved counts the store out once a step and
// back in but the last two chunks' (which stay in their slots); the plan's line names it. Where the
// store on the device does not fit but offloaded it does, the advice says so, and a run keeping it
// there is refused naming --offload attention; without --keep-attention the flag is refused.
TEST(CliKeepAttention, OffloadedStoreThroughTheCommandLine) {
  const TinyRun run;
  const auto& dir = run.dir;
  const std::string& m = run.m;
  const ModelConfig& cfg = run.cfg;
  const int64_t N = 256, C = 64, L = cfg.layers, H = cfg.heads, D = cfg.head_dim;
  const std::string flags = fmt::format("--seq-len {} --chunk-size {} --device sim --optimizer adamw --keep-attention",
                                        N, C);
  std::vector<std::string> steps[2];
  int64_t device[2] = {0, 0}, pinned[2] = {0, 0}, moved[2] = {0, 0};
  for (const bool home : {false, true}) {
    SCOPED_TRACE(fmt::format("offloaded={}", home));
    const std::string f = flags + (home ? " --offload attention" : "");
    const auto metrics = dir / fmt::format("o{}.jsonl", home);
    const CmdResult r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --steps 2 {} --metrics {}", m,
                                                  dir.string(), f, metrics.string()));
    ASSERT_EQ(r.code, 0) << r.out;
    std::string line;
    for (std::istringstream in(read_text(metrics)); std::getline(in, line);) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      steps[home].push_back(fmt::format("{}: loss {:a} grad_norm {:a}", j["step"].get<int>(), j["loss"].get<double>(),
                                        j["grad_norm"].get<double>()));
      device[home] = j["memory"]["device"]["activations"]["peak"].get<int64_t>();
      pinned[home] = j["memory"]["pinned"].value("activations", nlohmann::json{{"peak", 0}})["peak"].get<int64_t>();
      moved[home] = j["moved"]["activations"].get<int64_t>();  // (the step's)
    }
    const CmdResult p = oomb_cmd(dir, fmt::format("plan --model {} {} --json", m, f));
    ASSERT_EQ(p.code, 0) << p.out;
    EXPECT_EQ(nlohmann::json::parse(p.out)["device"]["activations"].get<int64_t>(), device[home]);
    EXPECT_EQ(nlohmann::json::parse(p.out)["pinned"]["activations"].get<int64_t>(), pinned[home]);
  }
  ASSERT_EQ(steps[0].size(), 2u);
  EXPECT_EQ(steps[0], steps[1]);
  const int64_t row = L * H * (D + 1) * 4;  // (fp32 on sim)
  EXPECT_EQ(device[0] - device[1], (N - 2 * C) * row);
  EXPECT_EQ(pinned[1] - pinned[0], N * row);
  EXPECT_EQ(moved[0], 0);
  EXPECT_EQ(moved[1], (2 * N - 2 * C) * row);  // every token's outputs out, back in but the last two chunks'
  const CmdResult t = oomb_cmd(dir, fmt::format("plan --model {} {} --offload attention", m, flags));
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_THAT(t.out, HasSubstr(fmt::format("--offload attention holds them in pinned memory ({} more pinned "
                                           "activations), two chunks' rows on the device, {} moved a sequence",
                                           format_bytes(N * row), format_bytes((2 * N - 2 * C) * row))));
  // a device that takes the store offloaded but not on the device: the advice names the flags
  auto device_need = [&](const std::string& more) -> int64_t {
    const CmdResult p = oomb_cmd(dir, fmt::format("plan --model {} {} --json{}", m, flags, more));
    EXPECT_EQ(p.code, 0) << p.out;
    return p.code == 0 ? nlohmann::json::parse(p.out)["device"]["total"].get<int64_t>() : 0;
  };
  const int64_t offloaded = device_need(" --offload attention"), resident = device_need("");
  ASSERT_LT(offloaded, resident);
  std::string plain = flags.substr(0, flags.find(" --keep-attention"));
  const CmdResult r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --steps 1 {} --device-memory {}", m,
                                                dir.string(), plain, offloaded));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--keep-attention --offload attention would fit (device {}, of "
                                           "--device-memory {})", format_bytes(offloaded), format_bytes(offloaded))));
  // with --keep-attention on that device: refused, naming the setting that fits
  const CmdResult kept = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --steps 1 {} --device-memory {}", m,
                                                   dir.string(), flags, offloaded));
  EXPECT_EQ(kept.code, 1);
  EXPECT_THAT(kept.out, HasSubstr(fmt::format("--offload attention fits (device {}, host and pinned",
                                              format_bytes(offloaded))));
  const CmdResult bad = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --steps 1 {} --offload attention", m,
                                                  dir.string(), plain));
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.out, HasSubstr("--offload attention: only with --keep-attention"));
}
