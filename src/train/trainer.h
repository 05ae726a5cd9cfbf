// The training loop: windows from a token source, gradient accumulation, optimizer steps,
// a progress line per logged step and one JSON line of metrics per step.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "data/token_source.h"
#include "dist/dist.h"
#include "train/model.h"
#include "train/optimizer.h"

namespace oomb {

struct TrainOptions {
  int64_t seq_len = 0, steps = 0;
  int64_t grad_accum = 1;  // windows per optimizer step
  int64_t log_every = 1;   // progress line every k steps (and the last)
  OptimConfig optim;
  std::string metrics_path;  // JSON lines, one per step; empty = none
  std::string tensorboard_dir;  // TensorBoard event file per run (train/tensorboard.h); empty = none
  double peak_flops = 0;     // the device's peak FLOP/s for MFU; 0 = unknown (no MFU reported)
  // A resumed run's first step (from 0). --metrics then keeps the file's lines of earlier steps and
  // continues it (the lines of later steps, written by the interrupted run, are dropped: they are
  // trained again).
  int64_t start_step = 0;
  // The ranks (--sp, --dp, --zero; dist/dist.h): dp rank d takes windows (k * grad_accum + i) * dp + d,
  // gradients are summed over every rank, rank 0 alone logs and writes. Null: one rank.
  Dist* dist = nullptr;
  uint64_t seed = 0;  // --seed: --lora-dropout's masks (window w: dropout_window_key(seed, w))
  // Held-out loss (--eval-data): after every eval_every-th step (0: after the last only), the mean
  // loss of windows 0 .. eval_windows - 1 of eval_data (N tokens each; dp rank d scores d, d + dp,
  // ...: eval_windows is a multiple of dp), with the weights that step made. Null: none.
  TokenSource* eval_data = nullptr;
  int64_t eval_every = 0, eval_windows = 1;
};

// Checkpointing's places in the loop.
struct TrainHooks {
  // Before the first step, the optimizer made: a resumed run restores its moments here.
  std::function<void(Optimizer&)> begin;
  // After each step, `done` steps done (parameters updated, metrics written): returning true stops
  // the run there (a checkpoint written on a signal).
  std::function<bool(int64_t done, Optimizer&)> after_step;
};

struct StepStats {
  int64_t step = 0;
  double loss = 0, accuracy = 0, grad_norm = 0, tokens_per_s = 0, elapsed_s = 0;
  double tflops = 0;  // model TFLOP/s (train/flops.h)
  double mfu = 0;     // tflops / peak, when the peak is known
  float lr = 0;
  int64_t tokens = 0;
  int64_t targets = 0;   // targets the loss is the mean over: every window's of the step, not ignored
  bool skipped = false;  // a non-finite loss or gradient (--skip-nonfinite), or no target to train
  // the held-out loss after this step (TrainOptions::eval_data; evaluated: false on other steps)
  bool evaluated = false;
  double eval_loss = 0, eval_accuracy = 0, eval_s = 0;
  double eval_update_waited_s = 0;  // --offload params: its wait for this step's update, beside it
  int64_t eval_targets = 0;
  // A mix of data (TokenSource::source_names): each source's share of the step, in its order (its
  // loss NaN where its windows held no target; empty with one source)
  struct Source {
    int64_t windows = 0, targets = 0;
    double loss = 0, accuracy = 0;
  };
  std::vector<Source> sources;
  std::vector<Source> eval_sets;  // several held-out sets (--eval-data given more than once): each one's
};

// Memory per tier and tag as JSON: {"host": {"weights": {"current": B, "peak": B}, ...}, "device": {...}}
nlohmann::json memory_json();

// --eval-windows against --dp: each dp rank scores as many windows; throws naming both otherwise.
void check_eval_windows(int64_t windows, int64_t dp);
// Held-out windows 0 .. windows - 1 of N hold a target to score (sep: --doc-mask's separator, or
// -1); throws naming the data otherwise: train() checks before its first step, the CLI before the
// model is built.
void check_eval_targets(TokenSource& eval_data, int64_t windows, int64_t N, int32_t sep);

// Runs optimizer steps opts.start_step .. opts.steps - 1. on_step (optional) sees every step's stats.
StepStats train(Model& model, TokenSource& data, const TrainOptions& opts, std::ostream& log,
                const std::function<void(const StepStats&)>& on_step = {}, const TrainHooks& hooks = {});

}  // namespace oomb
