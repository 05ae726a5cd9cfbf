#include "cli/train_checkpoints.h"

#include <algorithm>
#include <optional>
#include <chrono>
#include <tuple>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "core/error.h"
#include "hf/checkpoint.h"

namespace oomb::cli {

namespace fs = std::filesystem;

void add_checkpoint_flags(CLI::App* c, CheckpointFlags& f) {
  CLI::Option* dir = c->add_option("--checkpoint-dir", f.dir, "Write training checkpoints here (DIR/step-NNNNNN: "
                                   "weights, AdamW moments, data position, configuration) every --save-every steps "
                                   "and on SIGINT/SIGTERM");
  c->add_option("--save-every", f.save_every, "Write a checkpoint every K steps")->check(count())->needs(dir);
  c->add_option("--time-limit", f.time_limit, "Stop, writing a checkpoint, at the first step's end where another "
                "step (the longest so far) and a checkpoint would pass this much time since the start (90s, 45m, "
                "3h50m, 1d); exit status 75, so that a job script runs it again with --resume auto")->needs(dir);
  c->add_option("--keep-last", f.keep_last, "Keep the M newest checkpoints (older ones are deleted once a newer one "
                "is in place)")->check(count())->needs(dir);
  c->add_option("--resume", f.resume, "Continue from a checkpoint directory (DIR/step-NNNNNN), or auto: the newest "
                "complete one in --checkpoint-dir (none yet: start at step 0). Every flag that changes the math must "
                "be as in the checkpoint");
}

void refuse_earlier_checkpoints(const CheckpointFlags& f) {
  if (f.dir.empty() || !f.resume.empty()) return;
  const std::vector<CheckpointEntry> old = list_checkpoints(f.dir);
  OOMB_CHECK(old.empty(), "--checkpoint-dir {}: holds {} checkpoint{} of an earlier run (the newest: {}); continue "
             "it with --resume auto, or give this run a directory of its own", f.dir, old.size(),
             old.size() == 1 ? "" : "s", old.back().path.string());
}

namespace {
// The schedule a checkpoint ran under: this run's optimizer with the checkpoint's --steps and schedule flags
// (absent: cosine to 0.1, as before they were recorded); none where they do not read.
std::optional<OptimConfig> saved_schedule(const CheckpointState& saved, const OptimConfig& run) {
  OptimConfig c = run;
  const nlohmann::json& f = saved.flags;
  c.total_steps = saved.total_steps;
  c.schedule = "cosine", c.min_lr_ratio = 0.1f, c.decay_steps = 0;
  if (f.contains("--lr-schedule")) {
    if (!f["--lr-schedule"].is_string()) return std::nullopt;
    c.schedule = f["--lr-schedule"].get<std::string>();
  }
  if (f.contains("--min-lr-ratio")) {
    if (!f["--min-lr-ratio"].is_number()) return std::nullopt;
    c.min_lr_ratio = f["--min-lr-ratio"].get<float>();
  } else if (c.schedule == "constant") {
    c.min_lr_ratio = run.min_lr_ratio;  // (not recorded: it does nothing there)
  }
  if (f.contains("--decay-steps")) {
    if (!f["--decay-steps"].is_number_integer()) return std::nullopt;
    c.decay_steps = f["--decay-steps"].get<int64_t>();
  }
  try {
    check_schedule(c);
  } catch (const Error&) {
    return std::nullopt;
  }
  return c;
}
}  // namespace

RunCheckpoints::RunCheckpoints(const CheckpointFlags& f, CheckpointState now, const OptimConfig& optim, int64_t N,
                               int64_t grad_accum, DataPosition position, std::ostream& log)
    : f_(f), now_(std::move(now)), optim_(optim), N_(N), accum_(grad_accum), position_(std::move(position)), log_(log) {
  optim_.total_steps = now_.total_steps;
  if (!f_.time_limit.empty()) f_.time_limit_s = parse_duration(f_.time_limit, "--time-limit");
  if (!f_.dir.empty()) {
    std::error_code ec;
    OOMB_CHECK(!fs::exists(f_.dir, ec) || fs::is_directory(f_.dir, ec), "--checkpoint-dir {}: exists and is not a "
               "directory", f_.dir);
    if (fs::exists(f_.dir, ec) && leader()) remove_stale_checkpoint_files(f_.dir);
  }
  if (f_.resume.empty()) return;
  if (f_.resume == "auto") {
    OOMB_CHECK(!f_.dir.empty(), "--resume auto: needs --checkpoint-dir, where the newest checkpoint is looked for");
    from_ = latest_checkpoint(f_.dir, &log_);
    if (from_.empty()) {
      log_ << fmt::format("--resume auto: no checkpoint in {} yet; starting at step 0", f_.dir) << std::endl;
      return;
    }
  } else {
    from_ = f_.resume;
  }
  saved_ = open_checkpoint(from_);
  if (!f_.dir.empty() && f_.resume != "auto") {  // a branch from an earlier checkpoint would replace later ones
    std::vector<std::string> later;
    for (const CheckpointEntry& e : list_checkpoints(f_.dir))
      if (e.step > saved_.step) later.push_back(e.path.filename().string());
    OOMB_CHECK(later.empty(), "--resume {}: --checkpoint-dir {} holds {} later checkpoint{} ({}), which this run "
               "would replace as it saves (and --resume auto then take the newest); give this run a --checkpoint-dir "
               "of its own, or remove them", from_.string(), f_.dir, later.size(), later.size() == 1 ? "" : "s",
               later.size() <= 3 ? fmt::format("{}", fmt::join(later, ", "))
                                 : fmt::format("{}, ..., {}", later.front(), later.back()));
  }
  CheckpointState cmp = now_;  // a LoRA base's fingerprint is known once loaded (set_lora_base checks it)
  if (saved_.flags.contains("--model")) cmp.flags["--model"] = saved_.flags["--model"];
  // another schedule (--steps, --lr-schedule, --decay-steps, --min-lr-ratio): a checkpoint continues under it where
  // every step it has done had the lr this run gives it (wsd's stable phase, a constant schedule, a warmup), so
  // that those steps are this run's; its next_lr, the old schedule's, is then not this run's
  const std::optional<OptimConfig> old = saved_schedule(saved_, optim_);
  bool extended = old && saved_.step <= now_.total_steps && (old->total_steps != optim_.total_steps || old->schedule != optim_.schedule ||
                          wsd_decay_steps(*old) != wsd_decay_steps(optim_) || old->min_lr_ratio != optim_.min_lr_ratio);
  for (int64_t k = 0; extended && k < saved_.step && k < now_.total_steps; ++k)
    extended = lr_at(*old, k) == lr_at(optim_, k);
  check_same_run(saved_, cmp, from_.string(), extended);
  if (extended)
    log_ << fmt::format("{}: its {} steps done had the lr this schedule gives them, so it continues as --lr-schedule "
                        "{} over {} steps{} (it was --lr-schedule {} over {}{})",
                        from_.string(), saved_.step, optim_.schedule, now_.total_steps,
                        optim_.schedule == "wsd" ? fmt::format(", decaying over the last {}", wsd_decay_steps(optim_)) : "",
                        old->schedule, old->total_steps,
                        old->schedule == "wsd" ? fmt::format(", decaying over the last {}", wsd_decay_steps(*old)) : "")
         << std::endl;
  const double lr = double(lr_at(optim_, saved_.step));
  OOMB_CHECK(extended || lr == saved_.next_lr, "cannot resume from {}: the learning-rate schedule gives {} at step {}, the "
             "checkpoint says {} (written by another version of oomb?)", from_.string(), lr, saved_.step,
             saved_.next_lr);
}

RunCheckpoints::~RunCheckpoints() = default;

void RunCheckpoints::set_lora_base(std::string model, const std::string& fingerprint) {
  base_model_ = std::move(model);
  const std::string mine = "base weights " + fingerprint;  // (state.json's flags are keyed by flag names)
  now_.flags["--model"] = mine;
  if (!resuming()) return;
  const std::string saved = saved_.flags.value("--model", std::string("not recorded"));
  OOMB_CHECK(saved == mine, "cannot resume from {}: --model {} holds other base weights than the run that wrote it "
             "({} here, {} in the checkpoint); a LoRA checkpoint holds only the adapters, so the base must be the "
             "same", from_.string(), base_model_, mine, saved);
}

TrainHooks RunCheckpoints::hooks(Model& model) {
  TrainHooks h;
  h.begin = [this, &model](Optimizer& opt) {
    if (resuming()) {
      load_checkpoint(from_, saved_, model, opt);
      last_write_s_ = saved_.write_s;
      log_ << fmt::format("resumed from {}: step {}/{}", from_.string(), saved_.step, now_.total_steps)
           << std::endl;
    }
    if (!f_.dir.empty())  // (rank 0 alone says so)
      signals_ = std::make_unique<StopSignals>(leader() ? "\noomb train: signal received: the step under way "
                                                          "finishes, then a checkpoint is written (another signal "
                                                          "stops at once)\n"
                                                        : "");
    step_start_ = std::chrono::steady_clock::now();
  };
  h.after_step = [this, &model](int64_t done, Optimizer& opt) {
    const auto step_end = std::chrono::steady_clock::now();
    longest_step_s_ = std::max(longest_step_s_, std::chrono::duration<double>(step_end - step_start_).count());
    fs::path written;
    const bool last = done >= now_.total_steps;
    if ((f_.save_every > 0 && done % f_.save_every == 0) || (last && f_.final && !f_.dir.empty()))
      written = write(done, model, opt);
    // --time-limit: how long a checkpoint takes is measured by writing one after the first step where nothing
    // says (a fresh run; a resumed one takes its checkpoint's time), so that the stop leaves time for its own
    if (f_.time_limit_s > 0 && !wrote_any_ && last_write_s_ == 0 && done < now_.total_steps)
      written = write(done, model, opt);
    int sig = signals_ && !last ? signals_->pending() : 0;  // (at the last step: the run is done; saved() says)
    // --time-limit: rank 0's clock decides (0.5: below any signal's number)
    double s = sig > 0 ? double(sig) : done < now_.total_steps && leader() && time_is_up() ? 0.5 : 0.0;
    if (dist_ && dist_->size() > 1) dist_->world().all_reduce_max(&s, 1);  // every rank stops after the same step
    sig = s >= 1 ? int(s) : 0;
    step_start_ = std::chrono::steady_clock::now();
    if (s == 0) return false;
    if (written.empty()) written = write(done, model, opt);
    stopped_by_ = sig > 0 ? sig : -1;
    const std::string why = sig > 0 ? fmt::format("{} received", signal_name(sig))
                                    : fmt::format("--time-limit {} ({:.0f} s) would pass before another step and "
                                                  "checkpoint (the longest step so far {:.2f} s)",
                                                  f_.time_limit, f_.time_limit_s, longest_step_s_);
    log_ << fmt::format("oomb train: {}: stopped after step {}/{}; checkpoint written to {}; continue with "
                        "--resume {} (or --resume auto --checkpoint-dir {})",
                        why, done, now_.total_steps, written.string(), written.string(), f_.dir)
         << std::endl;
    return true;
  };
  return h;
}

fs::path RunCheckpoints::write(int64_t done, Model& model, const Optimizer& opt) {
  const int64_t dp = dist_ ? dist_->options().dp : 1;
  Comm* world = dist_ && dist_->size() > 1 ? &dist_->world() : nullptr;
  wrote_any_ = true;  // (every rank: --time-limit's measuring write is decided alike on every rank)
  if (!leader()) {  // rank 0 writes (the ranks hold the same weights); --zero 1, 2: the others send their moments
    CheckpointState st;
    st.step = done;
    return save_checkpoint(f_.dir, st, model, opt, {}, "", world);
  }
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointState st = now_;
  st.weights_dtype = weights_dtype();
  st.step = done;
  st.windows = done * accum_ * dp;
  position_(st.windows, st);
  st.next_lr = double(lr_at(optim_, done));
  // the tokenizer and chat files, so that a checkpoint serves generate and eval as --model would
  std::map<std::string, std::string> extra = f_.model_dir.empty() ? ExtraFiles{} : model_side_file_contents(f_.model_dir);
  if (!f_.config_toml.empty()) extra["config.toml"] = f_.config_toml;
  const fs::path p = save_checkpoint(f_.dir, st, model, opt, extra, base_model_, world);
  prune_checkpoints(f_.dir, done, f_.keep_last);
  last_write_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_ << fmt::format("checkpoint {} written ({:.2f} s)", p.string(), last_write_s_) << std::endl;
  return p;
}

// Another step (the longest so far) and a checkpoint (the last one's time) would pass the limit.
bool RunCheckpoints::time_is_up() const {
  if (f_.time_limit_s <= 0) return false;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - f_.started).count();
  return elapsed + longest_step_s_ + last_write_s_ > f_.time_limit_s;
}

int RunCheckpoints::finish() {
  if (stopped_by_ != 0) {
    signals_.reset();
    return stopped_by_ > 0 ? 128 + stopped_by_ : kTimeLimitExit;
  }
  const char* note = leader() ? "\noomb train: signal received: the final save finishes first (another signal "
                                "stops at once; an earlier --out stays whole)\n"
                              : "";
  if (signals_) signals_->set_note(note);  // (with --checkpoint-dir: a signal of the last step stays noted)
  else signals_ = std::make_unique<StopSignals>(note);
  return 0;
}

int RunCheckpoints::saved() {
  const int sig = signals_ ? signals_->pending() : 0;
  signals_.reset();
  return sig;
}

}  // namespace oomb::cli
