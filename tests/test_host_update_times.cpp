// How long the host's optimizer update (--offload params) took, and how long a step waited for it:
// UpdateGate counts the time wait() blocked, and oomb train's --metrics lines carry both figures
// ("host_update"), so a slow --offload params step on a GPU can say whether the host's AdamW is
// what it waits for.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "data/token_source.h"
#include "metrics_plan.h"
#include "model/update_gate.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/model.h"
#include "train/trainer.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;

namespace {
// The state of this process's thread `tid` (R running, S asleep, ...), from /proc
char thread_state(pid_t tid) {
  std::ifstream f(fmt::format("/proc/self/task/{}/stat", tid));
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t p = s.rfind(')');  // (the name in parentheses may hold spaces)
  return p != std::string::npos && p + 2 < s.size() ? s[p + 2] : '?';
}
}  // namespace

TEST(UpdateGate, TakeWaitedCountsOnlyTheTimeWaitBlocked) {
  UpdateGate gate;
  gate.wait(0);  // no update: at once
  EXPECT_EQ(gate.take_waited_s(), 0.0);
  gate.start(2);
  std::atomic<bool> waiting{false};
  const pid_t tester = gettid();
  std::thread worker([&] {
    // the 40 ms from when the test's thread sleeps in wait() (however long the machine's load kept
    // it from getting there)
    while (!waiting || thread_state(tester) != 'S') std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    gate.done(0);
    gate.done(1);
  });
  waiting = true;
  gate.wait(0);
  worker.join();
  const double waited = gate.take_waited_s();
  EXPECT_GE(waited, 0.035);  // (the sleep, less the clocks' granularity)
  gate.wait(1);              // done already: no time counted
  EXPECT_EQ(gate.take_waited_s(), 0.0);
}

// Held (tests' controls), the update does a unit only once a pass waited for it or a later one: after
// a wait for unit 1 it stands before unit 2 (which nothing asked for) until release().
TEST(UpdateGate, AHeldUpdateGoesAsFarAsAWaitOrTheRelease) {
  UpdateGate gate;
  gate.start(3, true);
  std::atomic<int> done{0};
  std::thread worker([&] {
    for (int u = 0; u < 3; ++u) {
      gate.hold_unit(u);
      done = u + 1;
      gate.done(u);
    }
  });
  gate.wait(1);
  EXPECT_EQ(done, 2);
  EXPECT_TRUE(gate.running());
  gate.release();
  worker.join();
  EXPECT_EQ(done, 3);
  gate.wait(2);
}

// The metrics lines of 3 AdamW steps on the simulated device: with --offload params, host_update
// on every line; the update beside the next step has none finished at the first line (null), then
// the previous step's seconds; --no-overlap-update times the step's own update and never waits;
// without --offload params (the update on the backend) no host_update at all.
TEST(CliHostUpdate, MetricsSayHowLongTheHostUpdateTookAndWasWaitedFor) {
  const auto dir = temp_dir();
  const std::string m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --preset tiny --out " + m).code, 0);
  write_tokens(dir / "t.bin", 2000, load_config(m).vocab, 5);
  for (const char* flags : {"--offload params", "--offload params --no-overlap-update", ""}) {
    SCOPED_TRACE(flags);
    const auto metrics = dir / "m.jsonl";
    const CmdResult r = oomb_cmd(dir, fmt::format("train --device sim --model {} --data {}/t.bin --seq-len 128 "
                                                  "--chunk-size 64 --steps 3 --optimizer adamw {} --metrics {}",
                                                  m, dir.string(), flags, metrics.string()));
    ASSERT_EQ(r.code, 0) << r.out;
    std::vector<nlohmann::json> lines;
    std::string line;
    for (std::istringstream in(read_text(metrics)); std::getline(in, line);)
      if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(lines.size(), 3u);
    const bool host = std::string(flags).find("params") != std::string::npos;
    const bool overlapped = host && std::string(flags).find("no-overlap") == std::string::npos;
    for (size_t k = 0; k < lines.size(); ++k) {
      SCOPED_TRACE(lines[k].dump());
      ASSERT_EQ(lines[k].contains("host_update"), host);
      if (!host) continue;
      const auto& h = lines[k]["host_update"];
      if (overlapped && k == 0) {
        EXPECT_TRUE(h["update_s"].is_null());
      } else {
        ASSERT_TRUE(h["update_s"].is_number());
        EXPECT_GT(h["update_s"].get<double>(), 0.0);
      }
      EXPECT_GE(h["waited_s"].get<double>(), 0.0);
      if (!overlapped) {
        EXPECT_EQ(h["waited_s"].get<double>(), 0.0);
      }
      // the last finished update's team: OpenMP's threads (OMP_NUM_THREADS, else the cores), less one
      // beside the next step (none finished at the first line)
      if (overlapped && k == 0) EXPECT_TRUE(h["threads"].is_null());
      else EXPECT_EQ(h["threads"].get<int>(), std::max(1, omp_get_max_threads() - (overlapped ? 1 : 0)));
    }
  }
}

// --update-threads sets the host update's threads, beside the next step or within it, with the
// same losses bit for bit (the update is elementwise, the norm's sum in a fixed order); it is
// refused without --offload params, and below 1.
TEST(CliHostUpdate, UpdateThreadsChangeNothingButTheThreads) {
  const auto dir = temp_dir();
  const std::string m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --preset tiny --out " + m).code, 0);
  write_tokens(dir / "t.bin", 2000, load_config(m).vocab, 5);
  const std::string run = fmt::format("train --device sim --model {} --data {}/t.bin --seq-len 128 --chunk-size 64 "
                                      "--steps 3 --optimizer adamw --offload params --metrics {}/m.jsonl",
                                      m, dir.string(), dir.string());
  std::vector<double> want;
  for (const char* flags : {"", " --update-threads 1", " --update-threads 3", " --update-threads 3 --no-overlap-update"}) {
    SCOPED_TRACE(flags);
    if (std::string(flags).find("threads 3") != std::string::npos &&
        tsan_leaves_out(fmt::format("an update on an OpenMP team of 3 ({})", flags)))
      continue;
    const CmdResult r = oomb_cmd(dir, run + flags);
    ASSERT_EQ(r.code, 0) << r.out;
    std::vector<double> losses;
    std::string line;
    for (std::istringstream in(read_text(dir / "m.jsonl")); std::getline(in, line);) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      losses.push_back(j["loss"].get<double>());
      const int given = std::string(flags).find("threads 1") != std::string::npos ? 1
                        : std::string(flags).find("threads 3") != std::string::npos ? 3 : 0;
      if (given && !j["host_update"]["threads"].is_null()) {
        EXPECT_EQ(j["host_update"]["threads"].get<int>(), given);
      }
    }
    ASSERT_EQ(losses.size(), 3u);
    if (want.empty()) want = losses;
    EXPECT_EQ(losses, want);
  }
  EXPECT_NE(oomb_cmd(dir, fmt::format("train --device sim --model {} --data {}/t.bin --seq-len 128 --chunk-size 64 "
                                      "--steps 1 --update-threads 2", m, dir.string())).out
                .find("--update-threads: only with --offload params"),
            std::string::npos);
  const CmdResult zero = oomb_cmd(dir, run + " --update-threads 0");
  EXPECT_NE(zero.code, 0);
  EXPECT_NE(zero.out.find("--update-threads"), std::string::npos) << zero.out;
}

namespace {
// Window w: step_tokens(N + 1, w)
class StepWindows final : public TokenSource {
 public:
  explicit StepWindows(int64_t vocab) : vocab_(vocab) {}
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override {
    const std::vector<int32_t> t = step_tokens(N + 1, uint64_t(w), vocab_);
    std::copy(t.begin() + t0, t.begin() + t0 + n, ids);
    std::copy(t.begin() + t0 + 1, t.begin() + t0 + n + 1, targets);
  }
  std::string describe() const override { return "test windows"; }

 private:
  int64_t vocab_;
};
}  // namespace

// The update beside the next step runs on a thread of its own, which OpenMP gives its default team
// and not the setting of the thread driving the run (as dist/rank_threads sets a rank's): the
// optimizer hands that setting over, so the update's team is the driving thread's less one, here
// two more than OpenMP's default would make it.
TEST(HostUpdate, TheUpdatesThreadTakesTheTeamOfTheThreadThatStartsIt) {
  if (tsan_leaves_out("an update on an OpenMP team of several")) return;
  const auto dir = temp_dir("_update_team");
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 3);
  const ModelConfig cfg = load_config(dir);
  auto sim = make_sim_backend(0, 0);
  ChunkPlan plan{16, 8};
  plan.offload_params = true;
  Model m(cfg, *sim, plan);
  load_for_training(m, dir);
  StepWindows data(cfg.vocab);
  TrainOptions o{32, 3, 1, 100};
  o.metrics_path = (dir / "m.jsonl").string();
  const int before = omp_get_max_threads();
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } const restore{before};
  omp_set_num_threads(before + 2);
  std::ostringstream log;
  train(m, data, o, log);
  const std::vector<nlohmann::json> lines = metrics_lines(dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(lines[0]["host_update"]["threads"].is_null());  // (none finished yet)
  for (size_t k = 1; k < 3; ++k) EXPECT_EQ(lines[k]["host_update"]["threads"], before + 1) << "step " << k;
}
