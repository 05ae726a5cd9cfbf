#include "cli/train_data.h"

#include <algorithm>
#include <tuple>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "train/trainer.h"

namespace oomb::cli {

TrainData open_train_data(const std::vector<std::string>& paths, const std::string& weights, int64_t vocab,
                          const DataOptions& o) {
  OOMB_CHECK(!paths.empty(), "--data is required");
  TrainData d;
  if (paths.size() == 1) {
    OOMB_CHECK(weights.empty(), "--data-weights: only with two --data sources or more (a mix)");
    d.one = open_training_data(paths[0], vocab, o);
    return d;
  }
  std::vector<int64_t> w = weights.empty() ? std::vector<int64_t>() : parse_data_weights(weights, paths.size());
  std::vector<MixSource> sources;
  for (size_t i = 0; i < paths.size(); ++i) {
    DataOptions oi = o;
    oi.packing.seed = o.packing.seed ^ (0x9e3779b97f4a7c15ull * i);  // (source 0: --seed itself)
    sources.push_back({open_training_data(paths[i], vocab, oi), paths[i], 0});
  }
  if (w.empty()) {  // each source's tokens
    for (const MixSource& s : sources) w.push_back(s.data->stream_size());
    w = lowest_terms(w);
  }
  for (size_t i = 0; i < paths.size(); ++i) sources[i].weight = w[i];
  d.mix = std::make_unique<MixedTokens>(std::move(sources));
  return d;
}

namespace {
// An --eval-data set, opened as --data is; the readers name their input --data, and here it is --eval-data.
std::unique_ptr<PackedTokens> open_eval_set(const std::string& path, int64_t vocab, const DataOptions& o) {
  try {
    return open_training_data(path, vocab, o);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("--data ", 0) == 0) throw Error("--eval-data " + what.substr(7));
    throw;
  }
}
}  // namespace

HeldOut open_held_out(const std::vector<std::string>& paths, const std::function<DataOptions(const std::string&)>& options,
                      int64_t vocab, int64_t N, const std::vector<int64_t>& windows, int64_t dp, int32_t sep,
                      const std::string& when, std::ostream& out) {
  OOMB_CHECK(windows.size() <= 1 || windows.size() == paths.size(),
             "--eval-windows: {} counts for {} --eval-data sets (one count for every set, or one per set)",
             windows.size(), paths.size());
  HeldOut h;
  std::vector<WindowSet> sets;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& p = paths[i];
    auto data = open_eval_set(p, vocab, options(p));
    const int64_t fit = data->windows_per_epoch(N);
    const int64_t w = windows.empty() ? std::max(dp, fit / dp * dp) : windows[windows.size() == 1 ? 0 : i];
    check_eval_windows(w, dp);  // (before the model is built)
    check_held_out_fits_a_window(*data, N, "--eval-data", p);
    check_eval_targets(*data, w, N, sep);
    const std::string wraps = w > fit || (!data->whole() && w * N + 1 > data->stream_size())
                                  ? fmt::format(" (more than its {} tokens hold: windows wrap around)", data->stream_size())
                                  : "";
    if (paths.size() == 1)
      out << fmt::format("held-out loss: {}, {} windows of {} tokens, {}{}", data->describe(), w, N, when, wraps)
          << std::endl;
    else
      out << fmt::format("{}  {}: {}, {} windows of {} tokens{}",
                         sets.empty() ? fmt::format("held-out loss: {} sets, {}:\n", paths.size(), when) : "", p,
                         data->describe(), w, N, wraps)
          << std::endl;
    h.set_windows.push_back(w);
    sets.push_back({std::move(data), p, w});
  }
  if (sets.size() == 1) h.one = std::move(sets[0].data);
  else h.sets = std::make_unique<WindowSets>(std::move(sets));
  return h;
}

DataIdentity TrainData::identity(const std::vector<std::string>& paths) const {
  if (!mix) return {paths.at(0), one->store().size(), data_fingerprint(one->store(), one->mask())};
  return {fmt::format("{}", fmt::join(paths, " + ")), mix->tokens(), mix->fingerprint()};
}

void TrainData::position(int64_t w, int64_t N, CheckpointState& st) {
  if (!mix) {
    std::tie(st.epoch, st.epoch_position) = one->position_of(w, N);
    return;
  }
  const std::vector<int64_t> before = mix->windows_before(w);
  st.sources.clear();
  for (int s = 0; s < mix->sources(); ++s) {
    const auto [epoch, offset] = mix->source(s).position_of(before[size_t(s)], N);
    st.sources.push_back({mix->path(s), before[size_t(s)], epoch, offset});
  }
}

std::string TrainData::weights_flag() const {
  if (!mix) return "";
  std::vector<int64_t> w;
  for (int s = 0; s < mix->sources(); ++s) w.push_back(mix->weight(s));
  return fmt::format("{}", fmt::join(w, ","));
}

// One source's note: its summary under --packing whole, or that a window is longer than it.
static void note_source(PackedTokens& data, const std::string& name, int64_t N, std::ostream& out) {
  if (data.whole()) {
    out << name << data.whole_summary(N) << std::endl;
    return;
  }
  if (N + 1 <= data.stream_size()) return;
  out << fmt::format("note: {}--seq-len {} is longer than the data ({} tokens): every sequence wraps around and "
                     "repeats the data {:.1f} times",
                     name, N, data.stream_size(), double(N + 1) / double(data.stream_size()))
      << std::endl;
}

void TrainData::notes(int64_t N, int64_t windows, std::ostream& out) {
  if (!mix) return note_source(*one, "", N, out);
  const std::vector<int64_t> taken = mix->windows_before(windows);
  out << fmt::format("data: a mix of {} sources over the run's {} windows of {} tokens:", mix->sources(), windows, N)
      << std::endl;
  for (int s = 0; s < mix->sources(); ++s) {
    PackedTokens& src = mix->source(s);
    const int64_t k = taken[size_t(s)];
    // the epochs those windows read: whole windows of an epoch's, or tokens of its stream
    const double epochs = src.whole() ? double(k) / double(src.windows_per_epoch(N))
                                      : double(k * N + (k > 0)) / double(src.stream_size());
    out << fmt::format("  {}: {:.4g}% of the windows, {} window{}, {:.3g} epoch{} of its {} tokens", mix->path(s),
                       100 * mix->share(s), k, k == 1 ? "" : "s", epochs, epochs == 1 ? "" : "s", src.stream_size())
        << std::endl;
  }
  for (int s = 0; s < mix->sources(); ++s) note_source(mix->source(s), mix->path(s) + ": ", N, out);
}

}  // namespace oomb::cli
