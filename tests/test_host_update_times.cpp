// How long the host's optimizer update (--offload params) took, and how long a step waited for it:
// UpdateGate counts the time wait() blocked, and oomb train's --metrics lines carry both figures
// ("host_update"), so a slow --offload params step on a GPU can say whether the host's AdamW is
// what it waits for.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

#include "model/update_gate.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

TEST(UpdateGate, TakeWaitedCountsOnlyTheTimeWaitBlocked) {
  UpdateGate gate;
  gate.wait(0);  // no update: at once
  EXPECT_EQ(gate.take_waited_s(), 0.0);
  gate.start(2);
  std::atomic<bool> waiting{false};
  std::thread worker([&] {
    while (!waiting) std::this_thread::yield();  // (the 40 ms from when the test is about to wait)
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
    }
  }
}
