// oomb train's checkpoint flags (--checkpoint-dir, --save-every, --keep-last, --resume) and what
// they do around the training loop: resolve and check the checkpoint a run resumes from, load it,
// write checkpoints every K steps and on SIGINT/SIGTERM, delete old ones (the files:
// train/checkpoint.h).
#pragma once
#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "cli/duration.h"
#include "cli/stop_signals.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace oomb::cli {

struct CheckpointFlags {
  std::string dir, resume;  // --checkpoint-dir, --resume DIR|auto
  int64_t save_every = 0, keep_last = 0;
  std::string time_limit;   // --time-limit: "" (none), or a duration such as 3h50m
  double time_limit_s = 0;  // its seconds (resolved by RunCheckpoints)
  // --time-limit counts from here: when the flags were made, as the process started
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::string config_toml;  // the run's resolved flags, saved in each checkpoint as config.toml
  bool final = false;       // the last step writes a checkpoint too (train: no --out holds the result)
  std::string model_dir;    // --model: its tokenizer and chat files go into each checkpoint
  bool any() const { return !dir.empty() || !resume.empty() || save_every > 0 || keep_last > 0; }
};
void add_checkpoint_flags(CLI::App* c, CheckpointFlags& f);
// Before any work: a fresh run (no --resume) into a --checkpoint-dir holding checkpoints is refused (its
// steps would mix with an earlier run's, and --resume auto later take the newest), naming the newest.
void refuse_earlier_checkpoints(const CheckpointFlags& f);
// The exit status of a run stopped by --time-limit (sysexits' EX_TEMPFAIL: run it again).
constexpr int kTimeLimitExit = 75;

class RunCheckpoints {
 public:
  // `now`: this run as a checkpoint at step 0 would describe it (model, data, flags, --steps,
  // weights_dtype). Resolves --resume (auto: the newest complete checkpoint in --checkpoint-dir, or
  // none: a fresh start) and refuses a checkpoint of another run, naming the difference. `optim` is
  // the run's optimizer configuration (for the schedule's check), N and grad_accum its window shape,
  // position(w, state) where window w starts in the data: its epoch and stream offset, or a mix's
  // sources' (state.json's epoch, epoch_position, sources).
  using DataPosition = std::function<void(int64_t window, CheckpointState& state)>;
  RunCheckpoints(const CheckpointFlags& f, CheckpointState now, const OptimConfig& optim, int64_t N,
                 int64_t grad_accum, DataPosition position, std::ostream& log);
  ~RunCheckpoints();
  bool resuming() const { return !from_.empty(); }
  int64_t start_step() const { return resuming() ? saved_.step : 0; }
  // The dtype the run's model was loaded in: --model's, or the checkpoint's record of it.
  const std::string& weights_dtype() const { return resuming() ? saved_.weights_dtype : now_.weights_dtype; }
  void set_weights_dtype(std::string d) { now_.weights_dtype = std::move(d); }  // a fresh run's, once loaded
  // A LoRA run: its frozen base (--model, named in the adapters written) and a fingerprint of the
  // base's values as loaded; resuming, it must equal the checkpoint's (the base is not in it).
  void set_lora_base(std::string model, const std::string& fingerprint);
  // begin: loads the checkpoint resumed from and, with --checkpoint-dir, catches SIGINT/SIGTERM;
  // after_step: writes checkpoints (every --save-every steps, and on a signal, then stops).
  TrainHooks hooks(Model& model);
  // Several ranks: rank 0 alone writes (the weights are the same on every rank; --zero 1, 2: each
  // rank's shard of the moments reaches it in pieces) and prunes; every rank loads (its shard of the
  // moments); a signal any rank caught stops every rank after the same step.
  void set_dist(Dist* d) { dist_ = d; }
  // After training: the exit status of a stopped run (128 + the signal; kTimeLimitExit for
  // --time-limit; the handlers removed), 0 if none stopped it: then a signal waits for the final
  // saves (a run done at its last step is not stopped) until saved().
  int finish();
  // The final saves are done: the signal that came after the last step began (0: none); the
  // handlers are removed.
  int saved();

 private:
  std::filesystem::path write(int64_t done, Model& model, const Optimizer& opt);

  CheckpointFlags f_;
  CheckpointState now_, saved_;
  OptimConfig optim_;
  int64_t N_, accum_;
  DataPosition position_;
  std::ostream& log_;
  std::filesystem::path from_;  // the checkpoint resumed from; empty: a fresh start
  std::string base_model_;      // LoRA: --model
  std::unique_ptr<StopSignals> signals_;
  int stopped_by_ = 0;  // the signal, or -1: --time-limit
  double longest_step_s_ = 0, last_write_s_ = 0;  // for --time-limit's forecast
  bool wrote_any_ = false;
  std::chrono::steady_clock::time_point step_start_ = std::chrono::steady_clock::now();
  bool time_is_up() const;
  Dist* dist_ = nullptr;
  bool leader() const { return !dist_ || dist_->leader(); }
};

}  // namespace oomb::cli
