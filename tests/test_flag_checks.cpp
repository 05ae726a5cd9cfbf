// Flags checked where a user trial found them taken without a word: a range or a choice refused as
// the command line is read (exit 2: --sparse-pages -3 ran dense, --seed -1 wrapped to 2^64 - 1,
// --offload kv,kv and --offload "" passed), flag combinations refused before any work (exit 1), and
// defaults and hints that point at the fix (eval's buckets, an adapter given as --model, generate's
// tokenizer of another model and its reach past the RoPE's positions).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model_fixture.h"
#include "test_util.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

TEST(FlagChecks, RangesAndChoicesAreRefusedAsTheCommandLineIsRead) {
  const auto dir = temp_dir();
  const std::string plan = "plan --preset tiny --seq-len 256 ";
  for (const auto& [args, said] : std::vector<std::pair<std::string, std::string>>{
           {plan + "--sparse-pages -3", "--sparse-pages: must be a whole number from 1"},
           {plan + "--sparse-tile 0", "--sparse-tile: must be a whole number from 1"},
           {plan + "--sink-pages -1", "--sink-pages: must be a whole number from 0"},
           {plan + "--sparse-score max", "--sparse-score: max not in {mean,quest}"},
           {plan + "--sp 0", "--sp: must be a whole number from 1"},
           {plan + "--dp 0", "--dp: must be a whole number from 1"},
           {plan + "--zero 5", "--zero: 5 not in {0,1,2,3}"},
           {plan + "--comm foo", "--comm: foo not in {auto,mpi,nccl}"},
           {plan + "--offload kv,kv", "--offload: 'kv' given twice"},
           {plan + "--offload kv,disk", "--offload: 'disk' is not one of kv, params, attention"},
           {plan + "--offload ''", "--offload: '' is not one of kv, params, attention"},
           {"train --device gpu", "--device: gpu not in {cpu,sim,cuda}"},
           {"train --seed -1", "--seed: must be a whole number from 0"},
           {"generate --seed -1 --prompt-ids 1", "--seed: must be a whole number from 0"},
           {"train --min-lr-ratio nan", "--min-lr-ratio: 'nan' is not a finite number"},
           {"train --lora-rank 2 --lora-dropout 1.5", "--lora-dropout: must be in [0, 1), got 1.5"},
           {"train --dist-timeout -5", "--dist-timeout: must be positive, got -5"}}) {
    SCOPED_TRACE(args);
    const CmdResult r = oomb_cmd(dir, args);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr(said));
  }
}

TEST(FlagChecks, CombinationsThatDoNothingAreRefused) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  const std::string train = fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 1 ", d);
  for (const auto& [args, said] : std::vector<std::pair<std::string, std::string>>{
           {train + "--no-overlap-update", "--no-overlap-update: only with --offload params"},
           {train + "--comm nccl", "--comm nccl: needs --device cuda (NCCL moves GPU memory), got --device cpu"},
           {"plan --preset tiny --seq-len 256 --comm nccl --device sim", "--comm nccl: needs --device cuda"}}) {
    SCOPED_TRACE(args);
    const CmdResult r = oomb_cmd(dir, args);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr(said));
    EXPECT_THAT(r.out, Not(::testing::ContainsRegex("step +[0-9]+/")));
  }
}

TEST(FlagChecks, DefaultsAndHintsPointAtTheFix) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_tokens(dir / "t.bin", 3000, 128, 1);
  // eval's default buckets: the most up to 16 that divide N (1000: 10), where 16 refused it
  CmdResult r = oomb_cmd(dir, fmt::format("eval --model {0}/m --data {0}/t.bin --seq-len 1000 --chunk-size 100", d));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("10 buckets"));
  r = oomb_cmd(dir, fmt::format("eval --model {0}/m --data {0}/t.bin --seq-len 1000 --buckets 16", d));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("--buckets 16: must divide --seq-len 1000"));  // (given: as given)
  // an adapter given as --model
  ASSERT_EQ(oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 1 --lora-rank 2 "
                                      "--out {0}/a", d)).code, 0);
  for (const char* cmd : {"eval --data t.bin --seq-len 64 --model", "generate --prompt-ids 1 --model"}) {
    r = oomb_cmd(dir, fmt::format("{} {}/a", cmd, d));
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_THAT(r.out, HasSubstr("is a LoRA adapter, not a model: give its base as --model and it as --lora")) << cmd;
  }
  // generate: the tokenizer of a model with more ids than this one's vocabulary, before any work
  write_bytes(dir / "big.json", byte_tokenizer_json({{"a", "b"}, {"ab", "c"}}).dump());  // ids past 256
  r = oomb_cmd(dir, fmt::format("generate --model {0}/m --tokenizer {0}/big.json --prompt hello", d));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("beyond the model's vocabulary (128): the tokenizer of another model?"));
  // and a note where the prompt and the new tokens reach past the positions the RoPE is set for
  nlohmann::json cfg = nlohmann::json::parse(read_text(dir / "m/config.json"));
  cfg["max_position_embeddings"] = 32;
  write_bytes(dir / "m/config.json", cfg.dump());
  r = oomb_cmd(dir, fmt::format("generate --model {0}/m --prompt-ids 1,2 --max-new-tokens 40 --no-stop-at-eos", d));
  EXPECT_EQ(r.code, 0) << r.out.substr(0, 400);
  EXPECT_THAT(r.out, HasSubstr("max_position_embeddings"));
}

}  // namespace
