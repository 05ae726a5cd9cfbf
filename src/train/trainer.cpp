#include "train/trainer.h"

#include "train/flops.h"
#include "train/metrics_lines.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <memory>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/resident.h"
#include "train/tensorboard.h"

namespace oomb {

namespace {
// Bytes copied between host and device so far by the parameter store (--offload params), the
// layer order's activation store and --offload attention's kept outputs (both activations), and the
// offloaded KV cache (--offload kv; model/sweep_plan counts the same).
struct Moved {
  int64_t weights = 0, grads = 0, activations = 0, kv = 0, kv_grads = 0;
};
Moved moved(const Model& m) {
  const ParamStore::Traffic& p = m.store().traffic();
  const ActivationStore* a = m.activations();
  const KeptAttentionOffload* o = m.kept_attention_offload();
  const KVTraffic& k = m.kv_cache().traffic();
  return {p.weights_in, p.grads_in + p.grads_out,
          (a ? a->traffic().in + a->traffic().out : 0) + (o ? o->traffic().in + o->traffic().out : 0), k.kv(),
          k.grads()};
}
}  // namespace

nlohmann::json memory_json() {
  nlohmann::json j = nlohmann::json::object();
  for (Tier tier : kTiers) {
    nlohmann::json t = nlohmann::json::object();
    for (int i = 0; i < kNumTags; ++i) {
      MemCounter c = Accountant::global().get(tier, Tag(i));
      if (c.peak > 0) t[std::string(tag_name(Tag(i)))] = {{"current", c.current}, {"peak", c.peak}};
    }
    MemCounter tot = Accountant::global().total(tier);
    t["total"] = {{"current", tot.current}, {"peak", tot.peak}};
    j[std::string(tier_name(tier))] = t;
  }
  return j;
}

// A source's figures from its sums: windows, targets, loss sum, correct (NaN loss without targets).
static StepStats::Source source_stats(double windows, double targets, double loss_sum, double correct) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {int64_t(windows), int64_t(targets), targets > 0 ? loss_sum / targets : nan,
          targets > 0 ? correct / targets : nan};
}

// The held-out loss of windows 0 .. o.eval_windows - 1 of o.eval_data (this dp rank's share, summed
// over the dp group), into st: the loss, accuracy and targets (and each set's, with several), and
// the seconds it took.
static void evaluate_held_out(Model& model, const TrainOptions& o, Dist& dist, StepStats& st) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t dp = dist.options().dp, N = o.seq_len;
  const size_t S = o.eval_data->source_names().size();
  std::vector<double> sums(3 + 4 * S, 0.0);  // loss, targets, correct; per set windows, targets, loss, correct
  for (int64_t w = dist.dp_rank(); w < o.eval_windows; w += dp) {
    const LossStats ls = model.evaluate(
        [&](int64_t t0, int64_t n, int32_t* ids, int32_t* tg) { o.eval_data->read(w, N, t0, n, ids, tg); }, N);
    sums[0] += ls.loss_sum, sums[1] += double(ls.targets), sums[2] += double(ls.correct);
    if (S > 0) {
      double* s = &sums[3 + 4 * size_t(o.eval_data->source_of(w))];
      s[0] += 1, s[1] += double(ls.targets), s[2] += ls.loss_sum, s[3] += double(ls.correct);
    }
  }
  dist.dp().all_reduce_sum(sums.data(), sums.size());  // (the sp ranks of a group already agree)
  OOMB_CHECK(sums[1] > 0, "--eval-data: its windows gave no targets to score");
  st.evaluated = true;
  st.eval_loss = sums[0] / sums[1], st.eval_accuracy = sums[2] / sums[1], st.eval_targets = int64_t(sums[1]);
  st.eval_sets.clear();
  for (size_t s = 0; s < S; ++s) {
    const double* b = &sums[3 + 4 * s];
    st.eval_sets.push_back(source_stats(b[0], b[1], b[2], b[3]));
  }
  st.eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_eval_targets(TokenSource& eval_data, int64_t windows, int64_t N, int32_t sep) {
  for (int64_t w = 0; w < windows; ++w)
    if (eval_data.targets_in(w, N, sep) > 0) return;
  fail("--eval-data {}: its {} window{} of {} tokens hold no target to score (every token in a prompt)",
       eval_data.describe(), windows, windows == 1 ? "" : "s", N);
}

void check_eval_windows(int64_t windows, int64_t dp) {
  OOMB_CHECK(windows % dp == 0, "--eval-windows {}: must be a multiple of --dp {} (each dp rank scores as many "
             "windows)", windows, dp);
}

// A mix's sources as the step's figures name them: each file's name (with its place, "2:name",
// where two share one).
static std::vector<std::string> source_labels(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  for (const std::string& p : paths) {
    std::string n = std::filesystem::path(p).filename().string();
    names.push_back(n.empty() ? p : n);
  }
  std::vector<std::string> labels = names;
  for (size_t i = 0; i < names.size(); ++i)
    if (std::count(names.begin(), names.end(), names[i]) > 1) labels[i] = fmt::format("{}:{}", i, names[i]);
  return labels;
}

// Each source's (or held-out set's) figures for --metrics: data, windows, targets, loss, accuracy.
static nlohmann::json sources_json(const std::vector<std::string>& names, const std::vector<StepStats::Source>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (size_t s = 0; s < v.size(); ++s)
    j.push_back({{"data", names[s]}, {"windows", v[s].windows}, {"targets", v[s].targets}, {"loss", v[s].loss},
                 {"accuracy", v[s].accuracy}});
  return j;
}

// A step's scalars for TensorBoard: the --metrics figures, memory per tier in MiB.
static std::vector<std::pair<std::string, float>> tensorboard_values(const StepStats& st, bool mfu,
                                                                     const std::vector<std::string>& sources,
                                                                     const std::vector<std::string>& eval_sets) {
  std::vector<std::pair<std::string, float>> v = {
      {"train/loss", float(st.loss)},          {"train/accuracy", float(st.accuracy)},
      {"train/lr", st.lr},                     {"train/grad_norm", float(st.grad_norm)},
      {"perf/tokens_per_s", float(st.tokens_per_s)}, {"perf/tflops", float(st.tflops)}};
  if (mfu) v.emplace_back("perf/mfu", float(st.mfu));
  for (size_t s = 0; s < st.sources.size(); ++s)  // (a source without a target in the step: no point)
    if (st.sources[s].targets > 0) v.emplace_back("train/loss/" + sources[s], float(st.sources[s].loss));
  if (st.evaluated) {
    v.emplace_back("eval/loss", float(st.eval_loss));
    v.emplace_back("eval/perplexity", float(std::exp(st.eval_loss)));
    v.emplace_back("eval/accuracy", float(st.eval_accuracy));
    for (size_t s = 0; s < st.eval_sets.size(); ++s)
      if (st.eval_sets[s].targets > 0) v.emplace_back("eval/loss/" + eval_sets[s], float(st.eval_sets[s].loss));
  }
  for (Tier tier : kTiers) {
    const MemCounter c = Accountant::global().total(tier);
    if (c.peak == 0) continue;
    v.emplace_back(fmt::format("memory/{}_MiB", tier_name(tier)), float(double(c.current) / 1048576.0));
    v.emplace_back(fmt::format("memory/{}_peak_MiB", tier_name(tier)), float(double(c.peak) / 1048576.0));
  }
  return v;
}

// "42s", "7m05s", "3h02m": a duration for the progress line.
static std::string clock_time(double seconds) {
  const int64_t s = int64_t(seconds + 0.5);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

// Opens --metrics: anew, or, resuming at `start`, keeping the lines of the steps before it.
static void open_metrics(std::ofstream& f, const std::string& path, int64_t start) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {  // (not /dev/null, a FIFO)
    std::ifstream in(path, std::ios::binary);
    OOMB_CHECK(in.good(), "--metrics {}: cannot read {}: {}", path, start > 0 ? "the interrupted run's lines" : "it",
               std::strerror(errno));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int64_t foreign = first_foreign_line(text);  // (a torn last line is no whole line)
    OOMB_CHECK(foreign == 0, "--metrics {}: line {} is not a metrics line (a JSON object with a \"step\"): the "
               "file is not a run's metrics, and {} would lose it; give another --metrics", path, foreign,
               start > 0 ? "keeping only the earlier steps' lines" : "starting it afresh");
    if (start > 0) write_file_atomic(path, metrics_before(text, start));
  }
  f.open(path, start > 0 ? std::ios::app : std::ios::trunc);
  OOMB_CHECK(f.good(), "--metrics {}: cannot open for writing: {}", path, std::strerror(errno));
}

StepStats train(Model& model, TokenSource& data, const TrainOptions& o, std::ostream& log,
                const std::function<void(const StepStats&)>& on_step, const TrainHooks& hooks) {
  OOMB_CHECK(o.seq_len > 0, "--seq-len: must be positive, got {}", o.seq_len);
  OOMB_CHECK(o.steps > 0, "--steps: must be positive, got {}", o.steps);
  OOMB_CHECK(o.grad_accum > 0, "--grad-accum: must be positive, got {}", o.grad_accum);
  OOMB_CHECK(o.start_step >= 0 && o.start_step <= o.steps, "resume: step {} is beyond --steps {}", o.start_step,
             o.steps);
  OOMB_CHECK(!o.eval_data || o.eval_windows > 0, "--eval-windows: must be positive, got {}", o.eval_windows);
  model.enable_grads();
  OptimConfig oc = o.optim;
  oc.total_steps = o.steps;
  Dist single;
  Dist& dist = o.dist ? *o.dist : single;
  const int64_t dp = dist.options().dp, dp_rank = dist.dp_rank();
  if (o.eval_data) {
    check_eval_windows(o.eval_windows, dp);
    check_eval_targets(*o.eval_data, o.eval_windows, o.seq_len, model.plan().doc_sep);  // (before anything is written)
  }
  const int zero = dist.size() > 1 ? dist.options().zero : 0;
  OOMB_CHECK((zero == 3) == model.sharded(), "train: --zero {} but a model {}built for --zero 3", zero,
             model.sharded() ? "" : "not ");
  const Tensor& g = model.grads().flat();
  GradSync sync(dist.group_for(g.tier), model.backend(), g.numel(), zero, g.tier);
  OptimShard shard;
  if (zero == 3) shard = {{}, &dist.world()};  // the model's buffers are this rank's packed shards
  else if (zero > 0) shard = {sync.shard(), zero == 2 ? &dist.world() : nullptr};
  Optimizer opt(oc, model.trainable(), model.grads(), model.backend(), shard);
  // host AdamW beside the next step's first layers (--no-overlap-update: the same pass within the step)
  if (dist.size() == 1 && !shard.on() && !shard.norm_comm && model.store().can_overlap_update())
    opt.overlap_with(model.store(), oc.overlap_update);
  if (hooks.begin) hooks.begin(opt);
  const bool lead = dist.leader();  // the one rank that logs and writes
  std::ofstream metrics;
  if (!o.metrics_path.empty() && lead) open_metrics(metrics, o.metrics_path, o.start_step);
  std::unique_ptr<TensorBoardWriter> tb;
  if (!o.tensorboard_dir.empty() && lead) tb = std::make_unique<TensorBoardWriter>(o.tensorboard_dir);
  const int64_t N = o.seq_len;
  // a mix's sources (none with one): as given, and as TensorBoard's tags name them
  const std::vector<std::string> source_names = data.source_names(), source_tags = source_labels(source_names);
  // several held-out sets (none with one): the same
  const std::vector<std::string> eval_names = o.eval_data ? o.eval_data->source_names() : std::vector<std::string>(),
                                 eval_tags = source_labels(eval_names);
  model.backend().take_stream_times();  // (OOMB_CUDA_TIMELINE: the first step's window from here, not the load)
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  StepStats st;
  for (int64_t k = o.start_step; k < o.steps; ++k) {
    const auto t0 = clock::now();
    const Moved moved0 = moved(model);
    model.zero_grads();
    // the loss is the mean over every target of the step: its windows' (of every dp rank), counted
    // first, so that a window holding fewer (prompts not trained) weighs less
    // (a mix: each source's windows and targets with them, and below its loss and correct targets)
    std::vector<double> counts(1 + 2 * source_names.size(), 0.0);  // targets; per source windows, targets
    for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
      const int64_t w = (k * o.grad_accum + micro) * dp + dp_rank, n = data.targets_in(w, N, model.plan().doc_sep);
      counts[0] += double(n);
      if (!source_names.empty()) {
        const size_t s = size_t(data.source_of(w));
        counts[1 + 2 * s] += 1, counts[2 + 2 * s] += double(n);
      }
    }
    dist.dp().all_reduce_sum(counts.data(), counts.size());  // (the sp ranks of a group already agree)
    st.step = k;
    st.targets = int64_t(counts[0]);
    if (st.targets == 0) {  // every target of the step ignored: nothing to train, on any rank
      // (no pass waits for the previous step's update beside it, nor does opt.step join it: the
      // next step's zero_grads must not clear gradients it still reads)
      opt.finish();
      st.loss = st.accuracy = st.grad_norm = std::numeric_limits<double>::quiet_NaN();
      st.lr = lr_at(oc, k);
      st.skipped = true;
      if (lead) log << fmt::format("step {}: skipped: its {} window{} of {} tokens hold no target to train (all context: prompts, or not an assistant's)",
                         k + 1, o.grad_accum * dp, o.grad_accum * dp == 1 ? "" : "s", N) << std::endl;
    }
    double loss_sum = 0;
    int64_t counted = 0, correct = 0;
    std::vector<double> by_source(2 * source_names.size(), 0.0);  // per source: loss, correct
    for (int64_t micro = 0; st.targets > 0 && micro < o.grad_accum; ++micro) {
      const int64_t w = (k * o.grad_accum + micro) * dp + dp_rank;
      model.set_dropout_key(dropout_window_key(o.seed, w));
      const LossStats ls = model.forward_backward(
          [&](int64_t t0, int64_t n, int32_t* ids, int32_t* tg) { data.read(w, N, t0, n, ids, tg); }, N, 1.0f,
          st.targets);
      loss_sum += ls.loss_sum;
      counted += ls.targets;
      correct += ls.correct;
      if (!by_source.empty()) {
        double* s = &by_source[2 * size_t(data.source_of(w))];
        s[0] += ls.loss_sum, s[1] += double(ls.correct);
      }
    }
    if (st.targets > 0) {
      sync.reduce(model.grads().flat());  // summed over ranks (zero 2: this rank's shard of the sum)
      // the step's loss, targets and correct ones, and a mix's per source (loss, correct), in one collective
      std::vector<double> sums = {loss_sum, double(counted), double(correct)};
      sums.insert(sums.end(), by_source.begin(), by_source.end());
      dist.dp().all_reduce_sum(sums.data(), sums.size());  // the sp ranks of a group already agree
      loss_sum = sums[0], counted = int64_t(sums[1]), correct = int64_t(sums[2]);
      std::copy(sums.begin() + 3, sums.end(), by_source.begin());
      OOMB_CHECK(counted == st.targets, "step {}: the model counted {} targets where the data counted {}", k + 1,
                 counted, st.targets);
      st.loss = loss_sum / double(counted);
      st.accuracy = double(correct) / double(counted);
    }
    st.sources.assign(source_names.size(), {});
    for (size_t s = 0; s < st.sources.size(); ++s)  // (a source without targets, as in a skipped step: NaN)
      st.sources[s] = source_stats(counts[1 + 2 * s], counts[2 + 2 * s], by_source[2 * s], by_source[2 * s + 1]);
    if (st.targets > 0 && !std::isfinite(st.loss) && !oc.skip_nonfinite) {
      const std::string w = first_nonfinite(model.params(), model.backend());
      fail("step {}: the loss is {}: {} (try a lower --lr, or --skip-nonfinite to skip such steps)", k + 1, st.loss,
           w.empty() ? std::string("every weight is finite, so the activations overflowed: the run diverged")
                     : "tensor '" + w + "' holds a non-finite weight");
    }
    if (st.targets > 0) {
      st.lr = lr_at(oc, k);  // (the schedule's, a skipped step's too; the optimizer takes the same)
      st.grad_norm = std::isfinite(st.loss) ? opt.step(k, &st.lr) : std::numeric_limits<double>::quiet_NaN();
      st.skipped = !std::isfinite(st.grad_norm);
      if (!st.skipped) sync.gather(model.trainable().flat());  // zero 1, 2: every rank's updated shard (3: per layer)
      if (st.skipped) log << fmt::format("step {}: skipped (loss {}, gradient norm {}; --skip-nonfinite)", k + 1,
                                         st.loss, st.grad_norm) << std::endl;
    }
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    st.tokens = N * o.grad_accum * dp;
    st.tokens_per_s = double(st.tokens) / dt;
    st.tflops = train_flops(model.config(), N) * double(o.grad_accum * dp) / dt / 1e12;
    st.mfu = o.peak_flops > 0 ? st.tflops * 1e12 / (o.peak_flops * dist.size()) : 0.0;  // per device
    st.elapsed_s = std::chrono::duration<double>(clock::now() - t_start).count();
    // the device's streams in this step (OOMB_CUDA_TIMELINE, every rank: a window a step): busy, at once, idle
    const StreamTimes streams = model.backend().take_stream_times();
    const Moved moved1 = moved(model);  // bytes the stores copied between host and device in this step
    // the host's optimizer update (--offload params): the last finished one's seconds (overlapped:
    // the previous step's, which ran beside this one) and how long this step waited for it
    const Optimizer::HostUpdateTimes host_update = opt.host_update_times();
    // the held-out loss with this step's weights, after the step's figures: its streams, copies and
    // its wait for this step's update (overlapped: it runs beside the evaluation) are its own
    st.evaluated = false;
    nlohmann::json eval_moved;
    if (o.eval_data && ((o.eval_every > 0 && (k + 1) % o.eval_every == 0) || k + 1 == o.steps)) {
      evaluate_held_out(model, o, dist, st);
      model.backend().take_stream_times();
      const Moved m = moved(model);
      eval_moved = {{"weights", m.weights - moved1.weights}, {"kv", m.kv - moved1.kv}};
      if (host_update.host) st.eval_update_waited_s = opt.host_update_times().waited_s;
    }
    if (metrics.is_open()) {
      nlohmann::json j = {{"step", k},         {"loss", st.loss},     {"accuracy", st.accuracy}, {"skipped", st.skipped},
                          {"lr", st.lr},       {"grad_norm", st.grad_norm}, {"tokens", st.tokens},
                          {"targets", st.targets},
                          {"tokens_per_s", st.tokens_per_s}, {"elapsed_s", st.elapsed_s},
                          {"tflops", st.tflops},
                          {"memory", memory_json()}};
      if (const Optimizer::HostUpdateTimes& h = host_update; h.host)
        j["host_update"] = {{"update_s", h.update_s >= 0 ? nlohmann::json(h.update_s) : nlohmann::json()},
                            {"waited_s", h.waited_s},
                            {"threads", h.threads > 0 ? nlohmann::json(h.threads) : nlohmann::json()}};
      if (streams.on)
        j["streams"] = {{"span_s", streams.span_s},         {"compute_s", streams.compute_s},
                        {"copy_s", streams.copy_s},         {"copy_in_s", streams.copy_in_s},
                        {"copy_out_s", streams.copy_out_s}, {"duplex_s", streams.duplex_s},
                        {"both_s", streams.both_s},         {"idle_s", streams.idle_s},
                        {"ops", streams.ops},               {"copies", streams.copies}};
      const Moved& m = moved1;
      j["moved"] = {{"weights", m.weights - moved0.weights}, {"grads", m.grads - moved0.grads},
                    {"activations", m.activations - moved0.activations}, {"kv", m.kv - moved0.kv},
                    {"kv_grads", m.kv_grads - moved0.kv_grads}};
      // what the process holds, beside the accountant's figures (libraries, allocator slack, runtimes)
      const ResidentMemory rss = resident_memory();
      j["rss"] = {{"current", rss.current}, {"peak", rss.peak}};
      if (o.peak_flops > 0) j["mfu"] = st.mfu;
      if (!st.sources.empty()) j["sources"] = sources_json(source_names, st.sources);
      if (st.evaluated) {
        j["eval"] = {{"loss", st.eval_loss},      {"perplexity", std::exp(st.eval_loss)},
                     {"accuracy", st.eval_accuracy}, {"targets", st.eval_targets},
                     {"windows", o.eval_windows}, {"seconds", st.eval_s}, {"moved", eval_moved}};
        if (host_update.host) j["eval"]["update_waited_s"] = st.eval_update_waited_s;
        if (!st.eval_sets.empty()) j["eval"]["sets"] = sources_json(eval_names, st.eval_sets);
      }
      errno = 0;
      metrics << j.dump() << "\n";
      metrics.flush();
      OOMB_CHECK(metrics.good(), "--metrics {}: cannot write step {}'s line{}", o.metrics_path, k,
                 errno ? std::string(": ") + std::strerror(errno) : "");
    }
    if (tb) tb->scalars(k, tensorboard_values(st, o.peak_flops > 0, source_tags, eval_tags));
    if (lead && (k % o.log_every == 0 || k + 1 == o.steps || k == o.start_step)) {
      const MemCounter host = Accountant::global().total(Tier::Host), dev = Accountant::global().total(Tier::Device),
                       pinned = Accountant::global().total(Tier::Pinned);
      log << fmt::format("step {:>5}/{} | loss {:.4f} | acc {:5.1f}% | lr {:.2e} | gnorm {:.3f} | {:.0f} tok/s{} | mem {}{}",
                         k + 1, o.steps, st.loss, 100 * st.accuracy, st.lr, st.grad_norm, st.tokens_per_s,
                         o.peak_flops > 0 ? fmt::format(" | MFU {:.1f}%", 100 * st.mfu) : "", format_bytes(host.peak),
                         dev.peak > 0 ? fmt::format(", device {}", format_bytes(dev.peak)) : "")
          << (pinned.peak > 0 ? fmt::format(", pinned {}", format_bytes(pinned.peak)) : "")
          << fmt::format(" | {} elapsed, ETA {}", clock_time(st.elapsed_s),
                         clock_time(st.elapsed_s / double(k + 1 - o.start_step) * double(o.steps - k - 1)))
          << std::endl;
    }
    if (lead && st.evaluated)
      log << fmt::format("eval after step {}: loss {:.4f} | perplexity {:.3f} | acc {:5.1f}% | {} windows, {} targets, "
                         "{:.1f}s", k + 1, st.eval_loss, std::exp(st.eval_loss), 100 * st.eval_accuracy,
                         o.eval_windows, st.eval_targets, st.eval_s)
          << std::endl;
    for (size_t s = 0; lead && st.evaluated && s < st.eval_sets.size(); ++s)
      log << fmt::format("  {}: loss {:.4f} | perplexity {:.3f} | acc {:5.1f}% | {} windows, {} targets", eval_names[s],
                         st.eval_sets[s].loss, std::exp(st.eval_sets[s].loss), 100 * st.eval_sets[s].accuracy,
                         st.eval_sets[s].windows, st.eval_sets[s].targets)
          << std::endl;
    if (on_step) on_step(st);
    if (hooks.after_step && hooks.after_step(k + 1, opt)) break;
  }
  opt.finish();  // the last update done: the caller may read or save the parameters
  return st;
}

}  // namespace oomb
