// The training loop: windows from a token source, gradient accumulation, optimizer steps,
// a progress line per logged step and one JSON line of metrics per step.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "data/token_source.h"
#include "train/model.h"
#include "train/optimizer.h"

namespace oomb {

struct TrainOptions {
  int64_t seq_len = 0, steps = 0;
  int64_t grad_accum = 1;  // windows per optimizer step
  int64_t log_every = 1;   // progress line every k steps (and the last)
  OptimConfig optim;
  std::string metrics_path;  // JSON lines, one per step; empty = none
  double peak_flops = 0;     // the device's peak FLOP/s for MFU; 0 = unknown (no MFU reported)
};

struct StepStats {
  int64_t step = 0;
  double loss = 0, accuracy = 0, grad_norm = 0, tokens_per_s = 0, elapsed_s = 0;
  double tflops = 0;  // model TFLOP/s (train/flops.h)
  double mfu = 0;     // tflops / peak, when the peak is known
  float lr = 0;
  int64_t tokens = 0;
  bool skipped = false;  // a non-finite loss or gradient, skipped (--skip-nonfinite)
};

// Memory per tier and tag as JSON: {"host": {"weights": {"current": B, "peak": B}, ...}, "device": {...}}
nlohmann::json memory_json();

// Runs opts.steps optimizer steps. on_step (optional) sees every step's stats.
StepStats train(Model& model, TokenSource& data, const TrainOptions& opts, std::ostream& log,
                const std::function<void(const StepStats&)>& on_step = {});

}  // namespace oomb
