#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"

namespace oomb::cli {

static CLI::Validator number_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& s) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (...) {
          return "'" + s + "' is not a number";
        }
        if (used != s.size() || !std::isfinite(v)) return "'" + s + "' is not a finite number";
        if (allow_zero ? v < 0 : v <= 0) return std::string("must be ") + (allow_zero ? "0 or more" : "positive") + ", got " + s;
        return {};
      },
      allow_zero ? "NUMBER >= 0" : "NUMBER > 0");
}

CLI::Validator positive() { return number_check(false); }

CLI::Validator non_empty() {
  return CLI::Validator([](std::string& s) -> std::string { return s.empty() ? "an empty value (an unset variable?)" : ""; },
                        "");
}

CLI::Validator count(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& s) -> std::string {
        const int64_t lo = allow_zero ? 0 : 1;
        const std::string range = fmt::format("a whole number from {} to {} (2^63 - 1)", lo, INT64_MAX);
        int64_t v = 0;
        const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (err == std::errc::result_out_of_range) return "'" + s + "' is beyond the 64-bit range; must be " + range;
        if (err != std::errc() || end != s.data() + s.size()) return "'" + s + "' is not " + range;
        if (v < lo) return "must be " + range + ", got " + s;
        return {};
      },
      allow_zero ? "INT >= 0" : "INT > 0");
}
CLI::Validator non_negative() { return number_check(true); }

CLI::Validator model_dir(bool config_file) {
  return CLI::Validator(
      [config_file](std::string& s) -> std::string {
        namespace fs = std::filesystem;
        std::error_code ec;
        const fs::path p(s);
        if (!fs::exists(p, ec)) return "'" + s + "': no such directory";
        if (config_file && fs::is_regular_file(p, ec) && p.extension() == ".json") return {};
        if (!fs::is_directory(p, ec))
          return "'" + s + "' is a file; give the model's directory (the folder holding config.json and the "
                 ".safetensors weights)";
        if (fs::exists(p / "adapter_config.json", ec) && !fs::exists(p / "config.json", ec))
          return "'" + s + "' is a LoRA adapter, not a model: give its base as --model and it as --lora";
        if (!fs::exists(p / "config.json", ec))
          return "'" + s + "' holds no config.json: not a Hugging Face model directory";
        return {};
      },
      "DIR");
}

}  // namespace oomb::cli
