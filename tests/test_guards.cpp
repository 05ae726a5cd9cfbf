// Guards around every input and output of the oomb command: one test per class of the issue
// "nothing a user has is destroyed, nothing runs blind". Each runs the failure (which today's code
// had) and checks the guard's message, and that the inputs of every refused run are unchanged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <functional>
#include <signal.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli/guards.h"
#include "cli/offload_advice.h"
#include "hf/checkpoint.h"
#include "hf/config.h"
#include "model/init.h"
#include "model/params.h"
#include "test_util.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

// Every file under the paths (recursively) and a hash of its bytes: inputs must come out unchanged.
std::map<std::string, size_t> hashes(const std::vector<fs::path>& paths) {
  std::map<std::string, size_t> h;
  for (const fs::path& p : paths) {
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) h[e.path().string()] = std::hash<std::string>{}(read_text(e.path()));
    } else if (fs::exists(p)) {
      h[p.string()] = std::hash<std::string>{}(read_text(p));
    }
  }
  return h;
}

void write_u32(const fs::path& p, const std::vector<uint32_t>& ids) {
  write_bytes(p, std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
}

std::vector<uint32_t> ids_below(int64_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937 g{uint32_t(seed)};
  std::vector<uint32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = g() % vocab;
  return v;
}

// A model directory's config and parameters, loaded as `oomb train` loads them.
struct Loaded {
  nlohmann::json config;
  std::vector<float> weights;
};
Loaded load_model(const fs::path& dir) {
  const ModelConfig c = load_config(dir);
  Params p(c, Tier::Host, Tag::IO);
  load_weights(dir, c, p);
  const float* f = p.flat().f();
  return {config_to_json(c), std::vector<float>(f, f + p.flat().numel())};
}
bool same(const Loaded& a, const Loaded& b) {
  return a.config == b.config && a.weights.size() == b.weights.size() &&
         std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * 4) == 0;
}

}  // namespace

// 1. Outputs never alias inputs: refused before anything is opened for writing.
TEST(Guards, OutputsNeverAliasInputs) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --vocab 300 --out {}/m", d)).code, 0);
  write_bytes(dir / "m/tokenizer.json", byte_tokenizer_json({{"a", "b"}}).dump());
  write_bytes(dir / "in.txt", "some text to tokenize, ab ab ab\n");
  write_u32(dir / "t.bin", ids_below(400, 128, 1));
  fs::create_directories(dir / "shards");
  write_u32(dir / "shards/a.bin", ids_below(300, 128, 2));
  fs::create_symlink(dir / "in.txt", dir / "link.txt");
  const auto before = hashes({dir / "m", dir / "in.txt", dir / "t.bin", dir / "shards"});
  const std::string train = fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 16 --steps 1 ", d);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fmt::format("tokenize --tokenizer {0}/m --input {0}/in.txt --output {0}/in.txt", d),
       "--output " + d + "/in.txt: is the same path as --input"},
      {fmt::format("tokenize --tokenizer {0}/m --input {0}/in.txt --output {0}/link.txt", d),
       "is the same path as --input"},  // through a symlink
      {fmt::format("tokenize --tokenizer {0}/m/tokenizer.json --input {0}/in.txt --output {0}/m/../m/tokenizer.json", d),
       "is the same path as --tokenizer"},
      {train + fmt::format("--metrics {}/t.bin", d), "--metrics " + d + "/t.bin: is the same path as --data"},
      {train + fmt::format("--out {}/m", d), "--out " + d + "/m: is the same path as --model"},
      {train + fmt::format("--out {}", d), "--out " + d + ": holds --model"},
      {fmt::format("train --model {0}/m --data {0}/shards --seq-len 16 --steps 1 --metrics {0}/shards/log.jsonl", d),
       "lies inside --data " + d + "/shards"},
      {train + fmt::format("--out {0}/o --metrics {0}/o/log.jsonl", d), "one output would overwrite the other"},
      // nothing goes inside a model's, a tokenizer's or an adapter's directory, and merge writes neither input
      {train + fmt::format("--metrics {}/m/config.json", d), "--metrics " + d + "/m/config.json: lies inside --model"},
      {train + fmt::format("--tensorboard {}/m/tb", d), "lies inside --model " + d + "/m"},
      {fmt::format("eval --model {0}/m --data {0}/t.bin --seq-len 16 --out {0}/m/model.safetensors", d),
       "--out " + d + "/m/model.safetensors: lies inside --model"},
      {fmt::format("tokenize --tokenizer {0}/m --input {0}/in.txt --output {0}/m/tokenizer.json", d),
       "--output " + d + "/m/tokenizer.json: lies inside --tokenizer"},
      {fmt::format("merge --model {0}/m --lora {0}/ad --out {0}/m", d), "--out " + d + "/m: is the same path as --model"},
      {fmt::format("merge --model {0}/m --lora {0}/m --out {0}/m/merged", d), "lies inside --model"},
      {fmt::format("eval --model {0}/m --lora {0}/ad --data {0}/t.bin --seq-len 16 --out {0}/ad/adapter_config.json", d),
       "lies inside --lora " + d + "/ad"},
  };
  fs::create_directories(dir / "ad");
  for (const auto& [args, msg] : cases) {
    SCOPED_TRACE(args);
    const CmdResult r = oomb_cmd(dir, args);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr(msg));
    EXPECT_THAT(r.out, Not(HasSubstr("step ")));
    EXPECT_EQ(hashes({dir / "m", dir / "in.txt", dir / "t.bin", dir / "shards"}), before);
  }
  EXPECT_FALSE(fs::exists(dir / "shards/log.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "o"));
}

// 2. A model directory is written as a unit; another model needs --force; a failed run leaves nothing.
TEST(Guards, ModelDirectoryIsWrittenAsAUnit) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny-qwen2 --out {}/other", d)).code, 0);
  write_bytes(dir / "other/NOTES.md", "my notes");
  write_u32(dir / "t.bin", ids_below(400, 128, 1));
  const auto before = hashes({dir / "m", dir / "t.bin", dir / "other"});
  const std::string train = fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 16 --steps 1 ", d);
  CmdResult r = oomb_cmd(dir, train + fmt::format("--out {}/other", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--out " + d + "/other: holds a different model (architectures"));
  EXPECT_THAT(r.out, HasSubstr("pass --force to replace it"));
  EXPECT_THAT(r.out, Not(HasSubstr("step ")));
  EXPECT_EQ(hashes({dir / "m", dir / "t.bin", dir / "other"}), before);
  // a run that fails before saving leaves no (empty) output directory behind
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/missing.bin --out {0}/new/model", d));
  EXPECT_NE(r.code, 0);
  EXPECT_FALSE(fs::exists(dir / "new")) << r.out;
  // --force replaces the model as a whole, and keeps the user's other files
  r = oomb_cmd(dir, train + fmt::format("--out {}/other --force", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(load_config(dir / "other").arch, Arch::Llama);
  EXPECT_EQ(read_text(dir / "other/NOTES.md"), "my notes");
  for (const auto& e : fs::directory_iterator(dir))  // no staging directory left
    EXPECT_THAT(e.path().filename().string(), Not(HasSubstr("oomb-new")));
  // the same model again (an earlier save of the same run) is replaced without --force; the directory
  // keeps its permissions (setgid too); a save a killed oomb left beside it goes at the start, said
  fs::permissions(dir / "other", fs::perms(02750), fs::perm_options::replace);
  const fs::path stale = dir / ".other.oomb-new.2000000000";  // (no such process)
  fs::create_directories(stale);
  write_bytes(stale / "model.safetensors", "half");
  r = oomb_cmd(dir, train + fmt::format("--out {}/other", d));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(fs::status(dir / "other").permissions(), fs::perms(02750));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--out {0}/other: removed {0}/.other.oomb-new.2000000000, a save an oomb "
                                           "that no longer runs left unfinished", d)));
  EXPECT_LT(r.out.find("removed"), r.out.find("step "));  // (before the training, not at the save)
  // an output below a file: named as not a directory
  write_bytes(dir / "afile", "x");
  r = oomb_cmd(dir, train + fmt::format("--out {}/afile/x", d));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--out {0}/afile/x: {0}/afile is not a directory", d)));
}

// 2. SIGKILL at random moments of saves over an existing model: the directory always loads as
// exactly the old or exactly the new model (never new weights beside an old config.json).
TEST(Guards, KillDuringSaveLeavesOldOrNewModel) {
  const auto dir = temp_dir();
  const fs::path out = dir / "model";
  // two models that differ in config.json (rope_theta, as the example) and in every weight
  const std::string shape = "--preset tiny --hidden 256 --intermediate 704 --layers 4 --heads 4 --kv-heads 2 --vocab 4096";
  const std::string args[2] = {fmt::format("init {} --seed 1 --rope-theta 10000 --force --out {}", shape, out.string()),
                               fmt::format("init {} --seed 2 --rope-theta 500000 --force --out {}", shape, out.string())};
  ASSERT_EQ(oomb_cmd(dir, args[1]).code, 0);
  const Loaded b = load_model(out);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(oomb_cmd(dir, args[0]).code, 0);
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Loaded a = load_model(out);
  ASSERT_FALSE(same(a, b));
  std::mt19937 g(20240917);
  // saves until 20 were killed: a machine under load runs some saves to the end before their moment
  // (each is checked all the same); the bound on tries only stops a kill that never lands
  int kills = 0, old_kept = 0, new_kept = 0, current = 0, on_rename = 0, saves = 0;
  for (int i = 0; i < 200 && kills < 20; ++i, ++saves) {
    const int next = 1 - current;
    const std::string cmd = fmt::format("exec {}/oomb {} > /dev/null 2>&1", binary_dir().string(), args[next]);
    // every other run is killed the moment a file is renamed into the directory (where a writer
    // that renames its files one by one has new weights beside the old config), else at a random
    // moment; a writer that swaps the whole directory renames nothing into it, so those runs are
    // killed at the random moment too
    const int ino = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ASSERT_GE(ino, 0);
    const bool at_rename = i % 2 == 1;
    if (at_rename) ::inotify_add_watch(ino, out.c_str(), IN_MOVED_TO);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const double u = std::uniform_real_distribution<double>(0, 1)(g);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(run_s * std::sqrt(u) * 1.1);  // more moments late
    for (bool renamed = false; !renamed;) {
      const int ms = int(std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count());
      pollfd pf{ino, POLLIN, 0};
      if (ms <= 0 || ::poll(&pf, 1, ms) <= 0) break;
      alignas(inotify_event) char buf[4096];
      const ssize_t len = ::read(ino, buf, sizeof buf);
      for (ssize_t at = 0; at < len;) {  // only a rename into the directory, not its own removal
        const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
        renamed = renamed || (ev->mask & IN_MOVED_TO);
        at += ssize_t(sizeof(inotify_event) + ev->len);
      }
      on_rename += renamed;
    }
    const bool killed = ::kill(pid, SIGKILL) == 0;
    ::close(ino);
    int status = 0;
    ::waitpid(pid, &status, 0);
    kills += killed && WIFSIGNALED(status);
    const Loaded now = load_model(out);
    const bool is_old = same(now, current ? b : a), is_new = same(now, next ? b : a);
    ASSERT_TRUE(is_old || is_new) << "kill " << i << (at_rename ? " (at a rename into the directory)" : "")
                                  << ": the directory is neither the old nor the new model";
    old_kept += is_old, new_kept += is_new;
    if (is_new) current = next;
  }
  std::cout << fmt::format("{} saves of {:.3f} s each, {} killed ({} at a rename into the directory): {} left the old "
                           "model, {} the new one",
                           saves, run_s, kills, on_rename, old_kept, new_kept)
            << std::endl;
  EXPECT_EQ(kills, 20);
  int staging = 0;  // a killed writer's staging directory is removed by the next write
  for (const auto& e : fs::directory_iterator(dir)) staging += e.path().filename().string().find("oomb-new") != std::string::npos;
  EXPECT_LE(staging, 1);
}

// 3. Every write is checked: a metrics line that cannot be written is an error naming the file.
TEST(Guards, EveryWriteIsChecked) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_u32(dir / "t.bin", ids_below(400, 128, 1));
  const CmdResult r = oomb_cmd(
      dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 16 --steps 2 --metrics /dev/full", d));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--metrics /dev/full: cannot write step 0's line: No space left on device"));
  // past a file-size limit (ulimit -f) the write fails as a full disk does, named, not by SIGXFSZ
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 8192;  // (the tiny model's weights are larger; the command's log is not)
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const CmdResult big = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 16 --steps 1 "
                                                  "--out {0}/o", d));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  EXPECT_EQ(big.code, 1) << big.out;
  EXPECT_THAT(big.out, HasSubstr("File too large")) << big.out;
  EXPECT_THAT(big.out, HasSubstr("oomb: error:")) << big.out;
  EXPECT_FALSE(fs::exists(dir / "o"));
}

// 4. Sizes never overflow: no wrapped byte counts, no saturated flags.
TEST(Guards, SizesNeverOverflow) {
  const auto dir = temp_dir();
  CmdResult r = oomb_cmd(dir, "plan --preset tiny --seq-len 4611686018427387904");  // 2^62: wrapped to 8.59 MiB
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--seq-len 4611686018427387904: the K/V pages of 2 layers would take more than 2^62 bytes"));
  EXPECT_THAT(r.out, Not(HasSubstr("total")));
  r = oomb_cmd(dir, "plan --preset tiny --seq-len 9223372036854775807 --json");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("more than 2^62 bytes"));
  r = oomb_cmd(dir, "plan --preset tiny --seq-len 99999999999999999999");  // was saturated to 2^63 - 1
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--seq-len: '99999999999999999999' is beyond the 64-bit range"));
  r = oomb_cmd(dir, "train --seq-len 1e3");
  EXPECT_THAT(r.out, HasSubstr("--seq-len: '1e3' is not a whole number"));
  // the largest plan that does fit 64 bits is computed exactly: every count non-negative
  r = oomb_cmd(dir, "plan --preset tiny --seq-len 1000000000000 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["total"].get<int64_t>(), int64_t(1000000000000) * 512);
}

// 5. Nothing runs blind: memory, wrapping, token ids and weights are checked before the first step.
TEST(Guards, NothingRunsBlind) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  auto ids = ids_below(20000, 128, 1);
  write_u32(dir / "short.bin", std::vector<uint32_t>(ids.begin(), ids.begin() + 20));
  ids[17000] = 500;  // one bad id, far beyond what a short run reaches
  write_u32(dir / "bad.bin", ids);
  ids[17000] = 5;
  write_u32(dir / "t.bin", ids);
  const auto before = hashes({dir / "m", dir / "t.bin", dir / "bad.bin", dir / "short.bin"});
  // the plan against the machine's memory: 2^36 tokens of K/V (32 TiB) on the host
  CmdResult r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 68719476736 --steps 1", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("host memory: the plan needs"));
  EXPECT_THAT(r.out, HasSubstr("(kv the most: "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("at most N = [0-9]+ fits at C = 1024"));
  EXPECT_THAT(r.out, HasSubstr("--force runs it anyway"));
  // a sequence longer than the data: allowed, and said
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/short.bin --seq-len 64 --chunk-size 16 --steps 1", d));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("note: --seq-len 64 is longer than the data (20 tokens): every sequence wraps around"));
  // held-out data shorter than a window is refused (the window would score its repeat), in eval and in train
  r = oomb_cmd(dir, fmt::format("eval --model {0}/m --data {0}/short.bin --seq-len 32 --chunk-size 16", d));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--data " + d + "/short.bin: 20 tokens, fewer than a window's 33"));
  EXPECT_THAT(r.out, HasSubstr("give --seq-len 19 or less"));
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/t.bin --eval-data {0}/short.bin --seq-len 32 "
                                "--chunk-size 16 --steps 1", d));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--eval-data " + d + "/short.bin: 20 tokens, fewer than a window's 33"));
  EXPECT_THAT(r.out, Not(HasSubstr("step ")));
  r = oomb_cmd(dir, fmt::format("eval --model {0}/m --data {0}/short.bin --seq-len 16 --chunk-size 16 --buckets 1", d));
  EXPECT_EQ(r.code, 0) << r.out;  // one window of 17 tokens fits in 20
  // every token id at open time, with the file and the index of the first bad one
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/bad.bin --seq-len 16 --steps 1", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--data " + d + "/bad.bin, token 17000: token id 500 is beyond the model's vocabulary (128)"));
  EXPECT_THAT(r.out, Not(HasSubstr("step ")));
  // non-finite weights are named with the tensor
  std::string tensor;
  {
    const ModelConfig c = load_config(dir / "m");
    Params p(c, Tier::Host, Tag::IO);
    init_params(p, 3);
    p.view(p.specs()[5]).f()[7] = std::nanf("");
    tensor = p.specs()[5].name;
    save_model(dir / "nan", c, p, DType::F32);
  }
  r = oomb_cmd(dir, fmt::format("train --model {0}/nan --data {0}/t.bin --seq-len 16 --steps 1", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("{}/nan: tensor '{}' holds a non-finite value (nan) at flat index 7", d, tensor)));
  EXPECT_THAT(r.out, Not(HasSubstr("lower --lr")));
  EXPECT_EQ(hashes({dir / "m", dir / "t.bin", dir / "bad.bin", dir / "short.bin"}), before);
}

// The tiny preset's plan at (N, C) on a backend computing on `tier`: what check_plan_fits searches.
static std::function<MemoryPlan(int64_t, int64_t)> tiny_plan_for(Tier tier) {
  return [tier](int64_t n, int64_t c) {
    return plan_memory(preset_config("tiny"), ChunkPlan{c, 64}, n, "adamw", 1 << 20, tier);
  };
}

TEST(Guards, PlanCheckNamesTierTagAndWhatFitsOrWarnsWithForce) {
  const auto plan_for = tiny_plan_for(Tier::Device);
  const MemoryPlan m = plan_for(1 << 20, 256);
  const cli::Limit dev{m.total(Tier::Device) / 2, "--device-memory"};
  const std::string e = error_of([&] { cli::check_plan_fits(m, 1 << 20, 256, {}, dev, plan_for, false, nullptr); });
  EXPECT_THAT(e, HasSubstr("device memory: the plan needs"));
  EXPECT_THAT(e, HasSubstr("more than --device-memory"));
  EXPECT_THAT(e, ::testing::ContainsRegex("at most N = [0-9]+ fits at C = 256"));
  std::ostringstream warn;
  EXPECT_EQ(error_of([&] { cli::check_plan_fits(m, 1 << 20, 256, {}, dev, plan_for, true, &warn); }), "(no error)");
  EXPECT_THAT(warn.str(), HasSubstr("warning (--force): device memory: the plan needs"));
}

// The other --offload settings whose plans fit both limits, each with its needs: not the run's own,
// not one the run cannot take, not one over either limit.
TEST(Guards, OffloadFitsNamesTheOtherSettingsWithinBothLimits) {
  auto plan_of = [](const cli::Offloads& o) -> std::optional<MemoryPlan> {
    if (o.kv && !o.params) return std::nullopt;  // a setting the run cannot take
    MemoryPlan m;
    m.at(Tier::Device, Tag::Weights) = (o.params ? 100 : 300) - (o.attention ? 50 : 0);
    m.at(Tier::Pinned, Tag::Weights) = (o.params ? 400 : 0) + (o.attention ? 50 : 0);
    m.at(Tier::Host, Tag::Optimizer) = o.params ? 50 + (o.kv ? 100 : 0) : 0;
    return m;
  };
  const cli::Limit host{500, "MemAvailable"}, dev{200, "--device-memory"};
  EXPECT_EQ(cli::offload_fits({}, false, host, dev, plan_of), "--offload params fits (device 100 B, host and pinned 450 B)");
  // from --offload params: none (300 B over the device's 200), kv,params (550 B over the host's 500)
  EXPECT_EQ(cli::offload_fits({false, true}, false, host, dev, plan_of), "");
  EXPECT_EQ(cli::offload_fits({false, true}, false, {600, "MemAvailable"}, {300, "--device-memory"}, plan_of),
            "running without --offload fits (device 300 B, host and pinned 0 B); --offload kv,params fits (device 100 B, host and "
            "pinned 550 B)");
  // a run keeping attention: the settings with its store offloaded too (250 B on the device without params)
  EXPECT_EQ(cli::offload_fits({}, true, host, {250, "--device-memory"}, plan_of),
            "--offload params fits (device 100 B, host and pinned 450 B); --offload attention fits (device 250 B, host "
            "and pinned 50 B); --offload params,attention fits (device 50 B, host and pinned 500 B)");
}

// A run whose plan does not fit the device is refused naming the --offload setting that would fit,
// with its device need; run with that setting within the same limit, it trains.
TEST(Guards, ARefusalNamesTheOffloadThatFitsAndThatSettingTrains) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_u32(dir / "t.bin", ids_below(2000, 128, 1));
  const std::string shape = "--seq-len 512 --chunk-size 128 --device sim";
  auto device_need = [&](const std::string& flags) -> int64_t {
    const CmdResult r = oomb_cmd(dir, fmt::format("plan --model {}/m {} {} --json", d, shape, flags));
    EXPECT_EQ(r.code, 0) << r.out;
    return r.code == 0 ? nlohmann::json::parse(r.out)["device"]["total"].get<int64_t>() : 0;
  };
  const int64_t resident = device_need(""), offloaded = device_need("--offload params");
  ASSERT_LT(offloaded, resident);  // the weights, gradients and moments leave the device
  const std::string train = fmt::format("train --model {0}/m --data {0}/t.bin {1} --steps 1 --device-memory {2}", d,
                                        shape, (resident + offloaded) / 2);
  CmdResult r = oomb_cmd(dir, train);
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("device memory: the plan needs"));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--offload params fits (device {},", format_bytes(offloaded))));
  r = oomb_cmd(dir, train + " --offload params");
  EXPECT_EQ(r.code, 0) << r.out;
}

// oomb plan --device-memory (and --host-memory): whether the plan fits those (exit status 0, or 3 where
// it does not), and which other --offload settings would, each with the device need its own plan gives;
// refused on the CPU.
TEST(Guards, PlanSaysWhetherItFitsAGivenDeviceAndWhatElseWould) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  const std::string plan = fmt::format("plan --model {}/m --seq-len 512 --chunk-size 128 --device sim", d);
  auto device_need = [&](const std::string& flags) -> int64_t {
    const CmdResult r = oomb_cmd(dir, plan + " --json " + flags);
    EXPECT_EQ(r.code, 0) << r.out;
    return r.code == 0 ? nlohmann::json::parse(r.out)["device"]["total"].get<int64_t>() : 0;
  };
  const int64_t resident = device_need(""), offloaded = device_need("--offload params");
  ASSERT_LT(offloaded, resident);
  const std::string limits = fmt::format(" --device-memory {} --host-memory {}", (resident + offloaded) / 2, int64_t(1) << 40);
  CmdResult r = oomb_cmd(dir, plan + limits);
  EXPECT_EQ(r.code, 3) << r.out;  // (does not fit: exit status 3, for scripts)
  EXPECT_THAT(r.out, HasSubstr("does not fit a device of"));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--offload params fits (device {},", format_bytes(offloaded))));
  r = oomb_cmd(dir, plan + limits + " --offload params");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("fits a device of {} and --host-memory", format_bytes((resident + offloaded) / 2))));
  EXPECT_THAT(r.out, Not(HasSubstr("does not fit")));
  // --sweep auto's host check takes --host-memory too
  EXPECT_THAT(r.out, HasSubstr(fmt::format("the {} available)", format_bytes(int64_t(1) << 40))));
  r = oomb_cmd(dir, plan + limits + " --json");
  EXPECT_EQ(r.code, 3) << r.out;
  const auto j = nlohmann::json::parse(r.out)["fits"];
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_THAT(j["other_offloads"].get<std::string>(), HasSubstr("--offload params fits"));
  r = oomb_cmd(dir, fmt::format("plan --model {}/m --seq-len 512 --device-memory 1000000", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--device-memory: only for --device sim or cuda"));
  r = oomb_cmd(dir, plan + " --host-memory 1000000");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--host-memory: only with --device-memory"));
}

// Ranks on one node share its memory: a plan that fits the whole of MemAvailable is refused when
// each of 4 ranks on the node would hold it (the limit is the rank's quarter, named as such).
TEST(Guards, RanksOnANodeShareItsHostMemory) {
  const auto plan_for = tiny_plan_for(Tier::Host);
  const MemoryPlan m = plan_for(1 << 16, 256);
  const int64_t need = m.total(Tier::Host) + m.total(Tier::Pinned), available = need * 2;
  EXPECT_EQ(error_of([&] { cli::check_plan_fits(m, 1 << 16, 256, cli::host_share(available, 1), {}, plan_for, false, nullptr); }),
            "(no error)");
  EXPECT_EQ(cli::host_share(available, 4).bytes, available / 4);
  const std::string e =
      error_of([&] { cli::check_plan_fits(m, 1 << 16, 256, cli::host_share(available, 4), {}, plan_for, false, nullptr); });
  EXPECT_THAT(e, HasSubstr("host memory: the plan needs"));
  EXPECT_THAT(e, HasSubstr("this rank's share of the host's available memory (MemAvailable / 4 ranks on this node)"));
  EXPECT_EQ(error_of([&] { cli::host_share(available, 0); }), "host memory: 0 ranks on this node");
}

// 6. One answer for one question: tokenize and train find the same document separator.
TEST(Guards, OneAnswerForTheDocumentSeparator) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  // Qwen2's config.json has no EOS by default (null): the separator comes from tokenizer_config.json
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny-qwen2 --vocab 300 --out {}/m", d)).code, 0);
  write_bytes(dir / "m/tokenizer.json", byte_tokenizer_json({{"a", "b"}}).dump());
  write_bytes(dir / "m/tokenizer_config.json", nlohmann::json{{"eos_token", bl("\n")}}.dump());
  std::string jl;
  for (int i = 0; i < 30; ++i) jl += fmt::format("{{\"text\": \"document {} says ab\"}}\n", i);
  write_bytes(dir / "docs.jsonl", jl);
  CmdResult r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/m --input {0}/docs.jsonl --output {0}/d.bin", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("each document ends with EOS 10 (from " + d + "/m/tokenizer_config.json eos_token"));
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/docs.jsonl --seq-len 32 --chunk-size 16 --steps 1 "
                                "--doc-mask", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("attention within documents ended by token 10"));
  // an eos_token_id beyond the vocabulary is named as such, by both
  nlohmann::json cfg = nlohmann::json::parse(read_text(dir / "m/config.json"));
  cfg["eos_token_id"] = 400;
  write_bytes(dir / "m/config.json", cfg.dump(2));
  const auto before = hashes({dir / "m", dir / "docs.jsonl", dir / "d.bin"});
  const std::string msg = d + "/m/config.json: eos_token_id 400 is beyond the vocabulary (ids 0..299)";
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/m --input {0}/docs.jsonl --output {0}/d.bin", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(msg));
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/docs.jsonl --seq-len 32 --steps 1 --doc-mask", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(msg));
  EXPECT_EQ(hashes({dir / "m", dir / "docs.jsonl", dir / "d.bin"}), before);
}

// 7. The process's resident memory beside the accountant's figures in --metrics.
TEST(Guards, MetricsReportResidentMemory) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_u32(dir / "t.bin", ids_below(400, 128, 1));
  const CmdResult r = oomb_cmd(
      dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 16 --steps 2 --metrics {0}/m.jsonl", d));
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream lines(read_text(dir / "m.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("rss")) << line;
    EXPECT_GT(j["rss"]["current"].get<int64_t>(), j["memory"]["host"]["total"]["current"].get<int64_t>());
    EXPECT_GE(j["rss"]["peak"].get<int64_t>(), j["rss"]["current"].get<int64_t>());
    ++n;
  }
  EXPECT_EQ(n, 2);
}

// 8. Small things a newcomer trips on.
TEST(Guards, SmallThings) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  CmdResult r = oomb_cmd(dir, "--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, ::testing::MatchesRegex("oomb [0-9]+\\.[0-9]+\\.[0-9]+\n"));
  r = oomb_cmd(dir, "trian --steps 3");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("'trian' is not a command; the commands are init, train, plan, tokenize"));
  r = oomb_cmd(dir, fmt::format("init --preset tiny --hidden 128 --out {}/m", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--intermediate not given: 256 (the preset's 128 scaled by --hidden 128 / 64)"));
  EXPECT_EQ(load_config(dir / "m").intermediate, 256);
  for (const auto& [args, msg] :
       std::vector<std::pair<std::string, std::string>>{
           {"tokenize --threads 0 --tokenizer x --input y --output z",
            "--threads: must be a whole number from 1 to 9223372036854775807 (2^63 - 1), got 0"},
           {"train --eos-id -3", "--eos-id needs --model and --data"},
           {"train --grad-clip -1", "--grad-clip: must be 0 or more, got -1"}}) {
    r = oomb_cmd(dir, args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_THAT(r.out, HasSubstr(msg)) << args;
    EXPECT_THAT(r.out, Not(HasSubstr("1797693"))) << args;
  }
}

// A user's slips, named before any work: --model given a file or a folder without config.json (every
// command that takes it); eval --out in a folder that does not exist (refused before the first window,
// not after the last); an --eval-data set named as --eval-data; a fresh run into a --checkpoint-dir
// holding an earlier run's checkpoints (both runs' steps would mix there, and --resume auto take the
// newest), which stay as they were; a run that saves nothing says so; --prompt-ids split by spaces.
TEST(Guards, SlipsAreNamedBeforeAnyWork) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_u32(dir / "t.bin", ids_below(2000, 128, 2));
  fs::create_directories(dir / "empty");
  for (const char* cmd : {"train --data {0}/t.bin --steps 1", "eval --data {0}/t.bin", "generate --prompt-ids 1,2",
                          "merge --lora {0}/m --out {0}/merged"}) {
    const std::string c = fmt::format(fmt::runtime(cmd), d);
    CmdResult r = oomb_cmd(dir, fmt::format("{} --model {}/m/config.json", c, d));
    EXPECT_NE(r.code, 0) << c;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("--model: '{}/m/config.json' is a file; give the model's directory", d))) << c;
    r = oomb_cmd(dir, fmt::format("{} --model {}/empty", c, d));
    EXPECT_NE(r.code, 0) << c;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("--model: '{}/empty' holds no config.json", d))) << c;
  }
  // (oomb plan reads the config alone: a model's config.json will do)
  CmdResult r = oomb_cmd(dir, fmt::format("plan --seq-len 64 --model {}/m/config.json", d));
  EXPECT_EQ(r.code, 0) << r.out;
  r = oomb_cmd(dir, fmt::format("plan --seq-len 64 --model {}/empty", d));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--model: '{}/empty' holds no config.json", d)));
  r = oomb_cmd(dir, fmt::format("generate --model {}/m --prompt-ids '1 2 3'", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--prompt-ids: '1 2 3' is not a token id below 128 (separate the ids by commas: 1,2,3)"));
  r = oomb_cmd(dir, fmt::format("eval --model {0}/m --data {0}/t.bin --seq-len 16 --out {0}/nodir/e.json", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--out {0}/nodir/e.json: its folder {0}/nodir does not exist", d)));
  write_bytes(dir / "in.txt", "some text\n");
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/m --input {0}/in.txt --output {0}/nodir/x.bin", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--output {0}/nodir/x.bin: its folder {0}/nodir does not exist", d)));
  EXPECT_THAT(r.out, Not(HasSubstr("windows")));
  const std::string train = fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 16 --chunk-size 8 --steps 2", d);
  r = oomb_cmd(dir, train + fmt::format(" --eval-data {}/nope.bin", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--eval-data {}/nope.bin: cannot open", d)));
  r = oomb_cmd(dir, train);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("16 tokens per step in chunks of 8, 2 steps"));
  EXPECT_THAT(r.out, HasSubstr("note: no --out, --checkpoint-dir or --save-best: the trained weights will not be saved"));
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {}/ck --save-every 1", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("will not be saved")));
  const auto before = hashes({dir / "ck"});
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {}/ck --save-every 1 --lr 1e-3", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--checkpoint-dir {0}/ck: holds 2 checkpoints of an earlier run (the newest: "
                                           "{0}/ck/step-000002); continue it with --resume auto", d)));
  EXPECT_THAT(r.out, Not(HasSubstr("step ")));
  // (the same from a checkpoint's config.toml, which records this --checkpoint-dir)
  r = oomb_cmd(dir, fmt::format("train --config {}/ck/step-000002/config.toml", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--checkpoint-dir {}/ck: holds 2 checkpoints of an earlier run", d)));
  EXPECT_EQ(hashes({dir / "ck"}), before);
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {}/ck --save-every 1 --resume auto", d));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("resumed from"));
}

// One exit status per kind of ending, for job scripts: 0 done (and --help, --version); 2 what is
// refused while the command line is read (an unknown command or flag, a value its flag's own check
// refuses, --model not a model directory, a flag without one it needs, a required flag missing, a
// repeated one, a --config file that does not read), named after "oomb: error:" with the command's
// --help; 1 what the command refuses once it runs, and a run that fails; 3 a plan that does not fit
// (PlanSaysWhetherItFits... above).
TEST(Guards, UsageErrorsExitTwoAndRunErrorsOne) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_u32(dir / "t.bin", ids_below(2000, 128, 2));
  const std::string train = fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 16 --steps 1", d);
  std::ofstream(dir / "bad.toml") << "seq-len = \n";
  const struct {
    std::string args, says;
  } usage[] = {
      {"trian", "'trian' is not a command"},
      {train + " --bogus", "The following argument was not expected: --bogus (oomb train --help)"},
      {train + " --seq-len abc", "--seq-len: 'abc' is not a whole number"},
      {fmt::format("eval --model {}/nope --data x", d), "no such directory (oomb eval --help)"},
      {fmt::format("tokenize --output {}/o.bin", d), "is required (oomb tokenize --help)"},
      {train + " --steps 2", "--steps"},
      {fmt::format("train --config {}/bad.toml", d), "bad.toml"},
      {fmt::format("train --config {}/bad.toml", d), "(oomb train --help)"},
      {train + " --save-every 1", "--save-every requires --checkpoint-dir"},
      {"plan --preset tiny", "--seq-len is required (oomb plan --help)"},
      {fmt::format("init --dtype fp8 --out {}/f", d), "--dtype: 'fp8' is not one of f32, bf16, f16"},
      {fmt::format("generate --model {}/m --prompt-ids 1 --top-p 0", d), "--top-p: must be positive, got 0"},
      {fmt::format("generate --model {}/m --prompt-ids 1 --top-p 1.5", d), "--top-p: must be at most 1, got 1.5"},
  };
  for (const auto& u : usage) {
    const CmdResult r = oomb_cmd(dir, u.args);
    EXPECT_EQ(r.code, 2) << u.args << "\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr("oomb: error: ")) << u.args;
    EXPECT_THAT(r.out, HasSubstr(u.says)) << u.args;
    EXPECT_THAT(r.out, Not(HasSubstr("step "))) << u.args;
  }
  EXPECT_EQ(oomb_cmd(dir, "train --help").code, 0);
  EXPECT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --dtype fp32 --out {}/f32", d)).code, 0);  // (an alias)
  EXPECT_EQ(oomb_cmd(dir, "--version").code, 0);
  // refused once the command runs (a preset it does not know, data it cannot open): 1
  CmdResult r = oomb_cmd(dir, "plan --seq-len 64 --preset nope");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("oomb: error: --preset: unknown preset 'nope'"));
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/nope.bin --seq-len 16 --steps 1", d));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--data {}/nope.bin: cannot open", d)));
  // a flag the chosen optimizer would ignore is refused; a warmup as long as the run is pointed out
  r = oomb_cmd(dir, train + " --optimizer sgd --weight-decay 0.1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--weight-decay: AdamW's only (--optimizer sgd has no weight decay)"));
  r = oomb_cmd(dir, train + " --warmup-steps 5");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("note: --warmup-steps 5 is longer than the run's 1 steps: the learning rate stays in its "
                               "warmup"));
  // (a warmup as long as the run reaches --lr at its last step)
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 16 --steps 2 --warmup-steps 2", d));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("stays in its warmup")));
  EXPECT_EQ(oomb_cmd(dir, train).code, 0);
}
