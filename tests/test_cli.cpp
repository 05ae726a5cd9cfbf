// The oomb command end to end: init, train with the stable flags, metrics, --out, and its errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/config.h"
#include "model/safetensors.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

struct CmdResult {
  int code;
  std::string out;
};

CmdResult oomb_cmd(const std::filesystem::path& dir, const std::string& args) {
  const auto log = dir / "cmd.log";
  const std::string cmd = fmt::format("{}/oomb {} > {} 2>&1", OOMB_BINARY_DIR, args, log.string());
  const int rc = std::system(cmd.c_str());
  return {WEXITSTATUS(rc), read_text(log)};
}

TEST(Cli, InitThenTrainWithTheStableFlags) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  CmdResult r = oomb_cmd(dir, fmt::format("init --preset tiny-qwen2 --dtype bf16 --seed 3 --out {}", m));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Qwen2ForCausalLM"));
  EXPECT_EQ(SafetensorsModel::open(m).get("model.embed_tokens.weight").dtype, DType::BF16);
  write_tokens(dir / "t.bin", 200, 128, 1);
  const auto out = (dir / "trained").string(), metrics = (dir / "m.jsonl").string();
  r = oomb_cmd(dir, fmt::format("train --model {} --data {} --seq-len 16 --steps 3 --optimizer adamw --lr 1e-3 "
                                "--weight-decay 0.1 --grad-clip 1 --warmup-steps 1 --device cpu --out {} --metrics {}",
                                m, (dir / "t.bin").string(), out, metrics));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("step     3/3"));
  std::istringstream lines(read_text(metrics));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"], n);
    for (const char* k : {"loss", "lr", "grad_norm", "tokens_per_s", "memory"}) EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_GT(j["memory"]["host"]["weights"]["peak"].get<int64_t>(), 0);
    EXPECT_GT(j["memory"]["host"]["kv"]["peak"].get<int64_t>(), 0);
    ++n;
  }
  EXPECT_EQ(n, 3);
  // saved in the dtype it was loaded in, with a config that loads
  EXPECT_EQ(SafetensorsModel::open(out).get("model.embed_tokens.weight").dtype, DType::BF16);
  EXPECT_EQ(load_config(out).arch, Arch::Qwen2);
}

TEST(Cli, PlanPredictsTheMeasuredPeaks) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  for (const char* dt : {"f32", "bf16"}) {
    SCOPED_TRACE(dt);
    CmdResult r = oomb_cmd(
        dir, fmt::format("plan --model {} --seq-len 512 --chunk-size 96 --page-size 32 --kv-grad-dtype {} --json", m, dt));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto plan = nlohmann::json::parse(r.out);
    r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 512 --chunk-size 96 --page-size 32 "
                                  "--kv-grad-dtype {} --steps 1 --metrics {}/m.jsonl", m, dir.string(), dt, dir.string()));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto host = nlohmann::json::parse(read_text(dir / "m.jsonl"))["memory"]["host"];
    for (const char* tag : {"weights", "grads", "optimizer", "activations", "kv", "kv_grad", "workspace", "data"})
      EXPECT_EQ(host[tag]["peak"].get<int64_t>(), plan[tag].get<int64_t>()) << tag;
  }
}

TEST(Cli, ErrorsNameTheFlagOrFile) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  CmdResult r = oomb_cmd(dir, "init --out " + m);
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("already holds a model"));
  r = oomb_cmd(dir, fmt::format("train --model {} --data {}/missing.bin", m, dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("missing.bin: cannot open"));
  r = oomb_cmd(dir, "train --model " + m);
  EXPECT_THAT(r.out, HasSubstr("--data is required"));
  r = oomb_cmd(dir, "train --optimizer lion");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--optimizer"));
  r = oomb_cmd(dir, "init --preset huge --out " + (dir / "x").string());
  EXPECT_THAT(r.out, HasSubstr("unknown preset 'huge'"));
  write_tokens(dir / "t.bin", 50, 1000, 2);  // ids up to 999, the tiny model has 128
  r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 8 --steps 1", m, dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("beyond the model's vocabulary (128)"));
  for (const char* bad : {"--lr -1", "--lr nan", "--grad-clip -1", "--seq-len 0", "--steps 0", "--chunk-size 0",
                          "--page-size 0", "--grad-accum 0"}) {
    r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin {}", m, dir.string(), bad));
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_THAT(r.out, HasSubstr(std::string(bad).substr(0, std::string(bad).find(' ')))) << bad;
  }
  write_bytes(dir / "file", "x");
  r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --out {}/file", m, dir.string(), dir.string()));
  EXPECT_THAT(r.out, HasSubstr("exists and is not a directory"));  // before any training step
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("step ")));
  r = oomb_cmd(dir, "init --hidden 100 --heads 8 --out " + (dir / "y").string());
  EXPECT_THAT(r.out, HasSubstr("not a multiple of --heads"));
  r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --device cuda", m, dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--device cuda:"));
}

}  // namespace
