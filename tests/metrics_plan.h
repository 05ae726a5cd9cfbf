// `oomb plan --json` against what `oomb train --metrics` measured, for the command-line tests
// (test_cli's runs on the CPU and the simulated device, test_cli_simt's on CUDA's code).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace oomb::testing {

// train's flags as the plan takes them: no separator id (--eos-id 5), only whether documents are masked
inline std::string plan_flags_of(std::string flags) {
  if (const size_t at = flags.find(" --eos-id 5"); at != std::string::npos) flags.erase(at, 11);
  return flags;
}

// Every line of a --metrics file, parsed.
inline std::vector<nlohmann::json> metrics_lines(const std::filesystem::path& p) {
  std::vector<nlohmann::json> v;
  std::string line;
  for (std::istringstream in(read_text(p)); std::getline(in, line);)
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

// The last line of a --metrics file.
inline nlohmann::json last_metrics_line(const std::filesystem::path& p) {
  const std::vector<nlohmann::json> v = metrics_lines(p);
  if (v.empty()) return nlohmann::json::parse("");  // (throws, as parsing an empty last line did)
  return v.back();
}

// Every (tier, tag) peak of a --metrics line's "memory" equal to the plan's (io too unless with_io
// is false: --zero 3's gathers pass through io, which the plan does not count).
inline void expect_peaks_equal_plan(const nlohmann::json& memory, const nlohmann::json& plan, bool with_io = true) {
  for (const char* tier : {"host", "device", "pinned"})
    for (const char* tag :
         {"weights", "grads", "optimizer", "activations", "kv", "kv_grad", "page_meta", "workspace", "data", "io"}) {
      if (!with_io && std::string(tag) == "io") continue;
      const int64_t measured = memory[tier].contains(tag) ? memory[tier][tag]["peak"].get<int64_t>() : 0;
      EXPECT_EQ(measured, plan[tier][tag].get<int64_t>()) << tier << " " << tag;
    }
}

}  // namespace oomb::testing
