// The oomb command's subcommands, each registered on a CLI11 app.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace oomb::cli {

// Flag validators with readable messages (finite numbers only, so "nan" and "inf" are rejected).
CLI::Validator positive();
CLI::Validator non_negative();
// Whole numbers in int64 (1.. or 0..): "1e3", "1.5" and values beyond 2^63 - 1 are errors, not
// truncated or saturated.
CLI::Validator count(bool allow_zero = false);

// --precision as given, else its default for the device: bf16 on cuda (tensor cores), fp32 elsewhere
// (the CPU reference and the simulated device).
inline std::string default_precision(const std::string& given, const std::string& device) {
  return !given.empty() ? given : device == "cuda" ? "bf16" : "fp32";
}

struct Command {
  CLI::App* sub;
  std::function<int()> run;  // runs the subcommand once parsed
};
Command add_init(CLI::App& app);
Command add_train(CLI::App& app);
Command add_plan(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_merge(CLI::App& app);
Command add_eval(CLI::App& app);

}  // namespace oomb::cli
