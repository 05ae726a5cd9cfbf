// TensorBoard event files: the records parse with a reader written from the format's definition
// (tests/tensorboard_reader.h: both CRCs checked bit by bit), a damaged byte is caught, and a short
// run's event file holds every step's scalars exactly as --metrics has them (as float32): loss, lr,
// grad norm, tokens/s, MFU, and memory per tier (host; device and pinned on the simulated device).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model_fixture.h"
#include "tensorboard_reader.h"
#include "test_util.h"
#include "train/tensorboard.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

TEST(TensorBoard, Crc32cCheckValueBothWays) {
  const std::string s = "123456789";  // the CRC-32C check value (RFC 3720, B.4): 0xE3069283
  EXPECT_EQ(crc32c_bitwise(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(s.data(), s.size()), 0xE3069283u);
  const std::string zeros(32, '\0');  // RFC 3720 B.4: 32 bytes of zeros give 0x8A9136AA
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

TEST(TensorBoard, RecordsRoundTripAndDamageIsCaught) {
  std::string file = tfrecord(event_file_version(1.5));
  file += tfrecord(event_scalars(2.25, 7, {{"train/loss", 3.25f}, {"memory/host_MiB", 1e6f}}));
  file += tfrecord(event_scalars(3.0, 300, {{"a", -0.0f}}));
  const std::vector<TbEvent> ev = read_events(file);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_EQ(ev[0].wall_time, 1.5);
  EXPECT_EQ(ev[1].step, 7);
  EXPECT_EQ(ev[1].wall_time, 2.25);
  EXPECT_EQ(ev[1].scalars.at("train/loss"), 3.25f);
  EXPECT_EQ(ev[1].scalars.at("memory/host_MiB"), 1e6f);
  EXPECT_EQ(ev[2].step, 300);  // a two-byte varint
  for (size_t at : {size_t(3), size_t(9), size_t(20), file.size() - 2}) {
    std::string bad = file;
    bad[at] ^= 0x10;
    EXPECT_THROW(read_events(bad), std::runtime_error) << "byte " << at;
  }
  EXPECT_THROW(read_events(file.substr(0, file.size() - 1)), std::runtime_error);
}

TEST(TensorBoard, EveryStepsScalarsEqualTheMetrics) {
  const auto dir = temp_dir();
  const auto m = dir / "m";
  const std::string oomb = (binary_dir() / "oomb").string();
  write_tokens(dir / "d.bin", 64 * 8 + 1, 128, 3);
  ASSERT_EQ(std::system(fmt::format("{} init --out {} > {} 2>&1", oomb, m.string(), (dir / "init.log").string()).c_str()), 0);
  const std::string cmd = fmt::format("{} train --model {} --data {} --seq-len 64 --chunk-size 32 --steps 7 --metrics {} "
                                      "--tensorboard {} > {} 2>&1", oomb, m.string(), (dir / "d.bin").string(),
                                      (dir / "run.jsonl").string(), (dir / "tb").string(), (dir / "train.log").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir / "train.log");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / "tb")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files[0].filename().string(), ::testing::StartsWith("events.out.tfevents."));
  const std::vector<TbEvent> ev = read_events(read_text(files[0]));
  ASSERT_EQ(ev.size(), 8u);  // the file version, then one event per step
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  std::istringstream lines(read_text(dir / "run.jsonl"));
  int64_t k = 0;
  for (std::string line; std::getline(lines, line); ++k) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const TbEvent& e = ev[size_t(k + 1)];
    EXPECT_EQ(e.step, j["step"].get<int64_t>());
    EXPECT_EQ(e.scalars.at("train/loss"), float(j["loss"].get<double>())) << "step " << k;
    EXPECT_EQ(e.scalars.at("train/lr"), j["lr"].get<float>()) << "step " << k;
    EXPECT_EQ(e.scalars.at("train/grad_norm"), float(j["grad_norm"].get<double>())) << "step " << k;
    EXPECT_EQ(e.scalars.at("perf/tokens_per_s"), float(j["tokens_per_s"].get<double>())) << "step " << k;
    EXPECT_EQ(e.scalars.at("memory/host_peak_MiB"),
              float(double(j["memory"]["host"]["total"]["peak"].get<int64_t>()) / 1048576.0));
    EXPECT_GT(e.wall_time, 1.6e9);
  }
  EXPECT_EQ(k, 7);
  // on the simulated device with pages offloaded and --peak-tflops: MFU, and memory per tier
  // (device and pinned beside host), each as --metrics has it
  const std::string sim = fmt::format("{} train --model {} --data {} --seq-len 64 --chunk-size 32 --steps 2 --device sim "
                                      "--offload kv --peak-tflops 2 --metrics {} --tensorboard {} > {} 2>&1", oomb,
                                      m.string(), (dir / "d.bin").string(), (dir / "sim.jsonl").string(),
                                      (dir / "tb-sim").string(), (dir / "sim.log").string());
  ASSERT_EQ(std::system(sim.c_str()), 0) << read_text(dir / "sim.log");
  const std::vector<TbEvent> se = read_events(read_text(std::filesystem::directory_iterator(dir / "tb-sim")->path()));
  ASSERT_EQ(se.size(), 3u);
  std::istringstream sim_lines(read_text(dir / "sim.jsonl"));
  k = 0;
  for (std::string line; std::getline(sim_lines, line); ++k) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ASSERT_LT(size_t(k + 1), se.size()) << "more metrics lines than events";
    const TbEvent& e = se[size_t(k + 1)];
    ASSERT_TRUE(j.contains("mfu"));
    EXPECT_EQ(e.scalars.at("perf/mfu"), float(j["mfu"].get<double>())) << "step " << k;
    EXPECT_GT(e.scalars.at("perf/mfu"), 0.0f);
    for (const char* tier : {"host", "device", "pinned"}) {
      const nlohmann::json& t = j["memory"][tier]["total"];
      EXPECT_GT(t["peak"].get<int64_t>(), 0) << tier;
      EXPECT_EQ(e.scalars.at(fmt::format("memory/{}_MiB", tier)), float(double(t["current"].get<int64_t>()) / 1048576.0))
          << tier << ", step " << k;
      EXPECT_EQ(e.scalars.at(fmt::format("memory/{}_peak_MiB", tier)), float(double(t["peak"].get<int64_t>()) / 1048576.0))
          << tier << ", step " << k;
    }
  }
  EXPECT_EQ(k, 2);
  // an output inside an input is refused, naming the flag
  const std::string alias = fmt::format("{} train --model {} --data {} --steps 1 --tensorboard {} > {} 2>&1", oomb,
                                        m.string(), (dir / "d.bin").string(), m.string(), (dir / "a.log").string());
  EXPECT_NE(std::system(alias.c_str()), 0);
  EXPECT_THAT(read_text(dir / "a.log"), HasSubstr("--tensorboard"));
}

}  // namespace
