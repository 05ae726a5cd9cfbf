// oomb train --config FILE (TOML): a run from the file equals the same run from flags, step for
// step; the command line wins over the file; each checkpoint keeps the run's flags as config.toml,
// and a run from that file repeats the run; a bad key, a section or a bad value is an error naming
// the file and the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

// Each step's loss, gradient norm and lr, as the metrics file holds them.
std::vector<std::string> steps_of(const std::filesystem::path& metrics) {
  std::vector<std::string> out;
  std::istringstream in(read_text(metrics));
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out.push_back(nlohmann::json{j["step"], j["loss"], j["grad_norm"], j["lr"]}.dump());
  }
  return out;
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = temp_dir();
    m = (dir / "m").string();
    d = (dir / "d.bin").string();
    write_tokens(d, 64 * 8 + 1, 128, 5);
    ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  }
  std::filesystem::path dir;
  std::string m, d;
};

TEST_F(ConfigFile, RunFromTomlEqualsRunFromFlags) {
  const CmdResult flags = oomb_cmd(dir, fmt::format("train --model {} --data {} --seq-len 64 --chunk-size 32 --steps 4 "
                                                    "--lr 0.002 --warmup-steps 1 --shuffle --eos-id 3 --metrics {}/a.jsonl "
                                                    "--checkpoint-dir {}/ck --save-every 2", m, d, dir.string(),
                                                    dir.string()));
  ASSERT_EQ(flags.code, 0) << flags.out;
  write_bytes(dir / "run.toml", fmt::format("# a run\nmodel = \"{}\"\ndata = \"{}\"\nseq-len = 64\nchunk-size = 32\n"
                                            "steps = 4\nlr = 0.002\nwarmup-steps = 1\nshuffle = true\neos-id = 3\n",
                                            m, d));
  const CmdResult toml = oomb_cmd(dir, fmt::format("train --config {}/run.toml --metrics {}/b.jsonl", dir.string(),
                                                   dir.string()));
  ASSERT_EQ(toml.code, 0) << toml.out;
  const auto a = steps_of(dir / "a.jsonl");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(steps_of(dir / "b.jsonl"), a);

  // the command line wins: --steps 2 and --lr 0.001 over the file's 4 and 0.002
  ASSERT_EQ(oomb_cmd(dir, fmt::format("train --config {0}/run.toml --metrics {0}/c.jsonl --steps 2 --lr=0.001",
                                      dir.string())).code, 0);
  const auto c = steps_of(dir / "c.jsonl");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_NE(c[1], a[1]);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("train --model {} --data {} --seq-len 64 --chunk-size 32 --steps 2 --lr 0.001 "
                                      "--warmup-steps 1 --shuffle --eos-id 3 --metrics {}/c2.jsonl", m, d,
                                      dir.string())).code, 0);
  EXPECT_EQ(steps_of(dir / "c2.jsonl"), c);

  // each checkpoint keeps the run's flags; a run from them (other outputs) repeats the run
  for (const char* step : {"step-000002", "step-000004"}) {
    const auto saved = dir / "ck" / step / "config.toml";
    ASSERT_TRUE(std::filesystem::exists(saved)) << saved;
    EXPECT_THAT(read_text(saved), HasSubstr("seq-len=64"));
    EXPECT_THAT(read_text(dir / "ck" / step / "state.json"), HasSubstr("config.toml"));  // its size is checked
  }
  // (not with its outputs: they hold the first run's results, and a fresh run would replace them)
  const std::string first = read_text(dir / "a.jsonl");
  const CmdResult same = oomb_cmd(dir, fmt::format("train --config {0}/ck/step-000004/config.toml --checkpoint-dir "
                                                   "{0}/ck2", dir.string()));
  EXPECT_EQ(same.code, 1);
  EXPECT_THAT(same.out, HasSubstr(fmt::format("--metrics {0}/a.jsonl (from --config {0}/ck/step-000004/config.toml): "
                                              "holds the results of the run that checkpoint comes from, which a fresh "
                                              "run would replace: give --metrics anew, or --resume auto to continue "
                                              "that run", dir.string())));
  EXPECT_EQ(read_text(dir / "a.jsonl"), first);
  EXPECT_FALSE(std::filesystem::exists(dir / "ck2"));
  // (--resume auto into a directory without checkpoints starts afresh: refused alike)
  const CmdResult fresh = oomb_cmd(dir, fmt::format("train --config {0}/ck/step-000004/config.toml --checkpoint-dir "
                                                    "{0}/ck2 --resume auto", dir.string()));
  EXPECT_EQ(fresh.code, 1);
  EXPECT_THAT(fresh.out, HasSubstr("holds the results of the run that checkpoint comes from"));
  EXPECT_EQ(read_text(dir / "a.jsonl"), first);
  const CmdResult again = oomb_cmd(dir, fmt::format("train --config {0}/ck/step-000004/config.toml --metrics "
                                                    "{0}/e.jsonl --checkpoint-dir {0}/ck2", dir.string()));
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(steps_of(dir / "e.jsonl"), a);
  // a resumed run's checkpoints keep its flags but --resume: repeating it starts afresh
  const CmdResult resumed = oomb_cmd(dir, fmt::format("train --config {0}/ck/step-000002/config.toml --resume "
                                                      "{0}/ck/step-000002 --checkpoint-dir {0}/ck3 --metrics {0}/r.jsonl",
                                                      dir.string()));
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_THAT(read_text(dir / "ck3" / "step-000004" / "config.toml"), ::testing::Not(HasSubstr("\nresume")));
  EXPECT_EQ(steps_of(dir / "r.jsonl"), std::vector<std::string>(a.begin() + 2, a.end()));  // (steps 2 and 3)
}

TEST_F(ConfigFile, ErrorsNameTheFileAndKey) {
  const std::string base = fmt::format("model = \"{}\"\ndata = \"{}\"\nseq-len = 64\nsteps = 1\n", m, d);
  write_bytes(dir / "bad.toml", base + "bogus-flag = 3\n");
  CmdResult r = oomb_cmd(dir, fmt::format("train --config {}/bad.toml", dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--config {}/bad.toml: unknown key 'bogus-flag': not a flag of oomb train",
                                           dir.string())));
  write_bytes(dir / "sec.toml", base + "[train]\nsteps = 2\n");
  r = oomb_cmd(dir, fmt::format("train --config {}/sec.toml", dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--config {}/sec.toml: sections are not read ('train.steps')", dir.string())));
  write_bytes(dir / "val.toml", base + "chunk-size = 0\n");  // (the flag's own check, as on the command line)
  r = oomb_cmd(dir, fmt::format("train --config {}/val.toml", dir.string()));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.out, HasSubstr("--chunk-size: must be a whole number from 1"));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("flags were also read from --config {}/val.toml", dir.string())));
  r = oomb_cmd(dir, fmt::format("train --config {}/missing.toml", dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--config {}/missing.toml: no such file", dir.string())));
  // the file is TOML, read strictly: an unclosed quote, a duplicate key, a value of another type than
  // the flag's, a list for a one-value flag, each named with its line; nothing runs
  const std::string top = fmt::format("model = \"{}\"\ndata = \"{}\"\n", m, d);
  for (const auto& [body, said] : std::vector<std::pair<std::string, std::string>>{
           {"out = \"o1 # not a comment\nsteps = 1\n", "bad.toml: line 3: key 'out': its quote (\") does not close"},
           {"steps = 1\nsteps = 2\n", "bad.toml: line 3: key 'steps': given again on line 4; give it once"},
           {"seq-len = \"64\"\n", "bad.toml: line 3: key 'seq-len': takes a number, not the string \"64\""},
           {"steps = 1.5\n", "--steps: '1.5' is not a whole number"},
           {"shuffle = 2\n", "bad.toml: line 3: key 'shuffle': a flag takes true or false, not 2"},
           {"shuffle = \"yes\"\n", "key 'shuffle': a flag takes true or false, not \"yes\""},
           {"offload = [\"kv\", \"params\"]\n", "key 'offload': takes one value, not a list"},
           {"out = \"runs/#1\"\n", "key 'out': its quote (\") does not close on the line before any '#'"},
           {"out = \"\"\"o1\"\"\"\n", "key 'out': a multi-line string (\"\"\") is not read"}}) {
    SCOPED_TRACE(body);
    write_bytes(dir / "bad.toml", top + body);
    r = oomb_cmd(dir, fmt::format("train --config {}/bad.toml", dir.string()));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr(said));
    EXPECT_THAT(r.out, Not(HasSubstr("step ")));
    EXPECT_FALSE(std::filesystem::exists(dir / "\"o1"));
  }
  r = oomb_cmd(dir, fmt::format("train --config {}", dir.string()));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--config {}: is a directory, not a TOML file", dir.string())));
  r = oomb_cmd(dir, fmt::format("train --model {} --data {} --steps 1 --steps 2", m, d));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.out, HasSubstr("--steps: given 2 times; give it once"));
  // plan reads a train run's file, passing over what it does not take
  write_bytes(dir / "run2.toml", top + "seq-len = 64\nsteps = 3\nlr = 0.01\n");
  r = oomb_cmd(dir, fmt::format("plan --config {}/run2.toml", dir.string()));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("train's flags that plan does not take, passed over: data, steps, lr"));
  EXPECT_THAT(r.out, HasSubstr("N = 64"));
  // eval reads it too
  write_bytes(dir / "eval.toml", fmt::format("model = \"{}\"\ndata = \"{}\"\nseq-len = 64\nbuckets = 3\n", m, d));
  r = oomb_cmd(dir, fmt::format("eval --config {}/eval.toml", dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--buckets 3: must divide --seq-len 64"));
  EXPECT_EQ(oomb_cmd(dir, fmt::format("eval --config {}/eval.toml --buckets 4", dir.string())).code, 0);
}

}  // namespace
