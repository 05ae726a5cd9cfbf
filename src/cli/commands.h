// The oomb command's subcommands, each registered on a CLI11 app.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "core/dtype.h"

namespace oomb::cli {

// Flag validators with readable messages (finite numbers only, so "nan" and "inf" are rejected).
CLI::Validator positive();
CLI::Validator non_negative();
// Whole numbers in int64 (1.. or 0..): "1e3", "1.5" and values beyond 2^63 - 1 are errors, not
// truncated or saturated.
CLI::Validator count(bool allow_zero = false);
// A text value that is not empty (`--out "$OUT"` with OUT unset): main.cpp puts it on every text flag.
CLI::Validator non_empty();
// --model: an existing directory holding a config.json (a file given, or a folder without one, is named so);
// config_file: a .json file too (oomb plan reads the config alone).
CLI::Validator model_dir(bool config_file = false);

// oomb plan --device-memory's exit status when the plan does not fit (the plan printed all the same).
inline constexpr int kPlanDoesNotFit = 3;

// --precision as given, else its default for the device: bf16 on cuda (tensor cores), fp32 elsewhere
// (the CPU reference and the simulated device).
inline std::string default_precision(const std::string& given, const std::string& device) {
  return !given.empty() ? given : device == "cuda" ? "bf16" : "fp32";
}

// The same as the dtype a ChunkPlan takes.
inline DType precision_dtype(const std::string& given, const std::string& device) {
  return default_precision(given, device) == "bf16" ? DType::BF16 : DType::F32;
}
// --kv-dtype: "auto" follows the precision (under bf16 every layer rounds K and V to bf16 for
// attention's matmuls, so bf16 pages hold the very values f32 pages would, in half the bytes);
// "f32" or "bf16" as given.
inline DType kv_page_dtype(const std::string& given, DType precision) {
  return given == "auto" ? precision : dtype_parse(given);
}

// --keep-attention (oomb train, oomb plan): ChunkPlan::keep_attention for the run's --seq-len.
inline constexpr const char* KEEP_ATTENTION_HELP =
    "Keep every layer's attention output and LSE for the whole sequence in the backend's memory (the device's, "
    "or pinned host memory with --offload attention; the host's on --device cpu; L x N x H x (2 D + 4) "
    "bytes under --precision bf16, (D + 1) x 4 under fp32; tag activations), so that no layer attends again "
    "before its backward: L attention forward passes a "
    "step instead of 2 L - 1 (the layer order, or sparse pages: 2 L); the same bits";

// The --precision option of the commands that run a model (train's has its own help).
inline CLI::Option* add_precision_flag(CLI::App* c, std::string& precision, const char* what) {
  return c->add_option("--precision", precision, std::string("fp32, or bf16: ") + what +
                                                     " read bf16 weights and activations and accumulate in fp32, as "
                                                     "oomb train does; default bf16 on --device cuda, fp32 elsewhere")
      ->check(CLI::IsMember({"fp32", "bf16"}));
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
