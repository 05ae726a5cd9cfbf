#include "cli/train_data.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <tuple>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "train/trainer.h"

namespace oomb::cli {

namespace {

// One weight as written, exactly: digits with an optional fraction and an optional exponent
// ("0.7", "3", "2e-1", ".5"), read as m x 10^e with m's leading and trailing zeros dropped (at most
// 15 significant digits); false for anything else.
bool read_decimal(const std::string& s, int64_t& m, int64_t& e) {
  std::string digits;
  int64_t exp = 0;
  size_t i = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) digits += s[i];
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) digits += s[i], --exp;
  if (digits.empty()) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const bool minus = ++i < s.size() && s[i] == '-';
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    int64_t x = 0;
    const size_t from = i;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) x = std::min<int64_t>(x * 10 + (s[i] - '0'), 1 << 20);
    if (i == from) return false;
    exp += minus ? -x : x;
  }
  if (i != s.size()) return false;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return m = 0, e = 0, true;  // zero
  const size_t last = digits.find_last_not_of('0');
  exp += int64_t(digits.size() - 1 - last);
  digits = digits.substr(first, last + 1 - first);
  if (digits.size() > 15) return false;
  m = std::stoll(digits), e = exp;
  return true;
}

// Whole numbers in the same ratio, divided by their greatest common divisor.
std::vector<int64_t> lowest_terms(std::vector<int64_t> w) {
  int64_t g = 0;
  for (int64_t x : w) g = std::gcd(g, x);
  for (int64_t& x : w) x /= g;
  return w;
}

}  // namespace

std::vector<int64_t> parse_data_weights(const std::string& s, size_t sources) {
  std::vector<std::pair<int64_t, int64_t>> read;  // m, e
  size_t at = 0;
  while (true) {
    const size_t comma = s.find(',', at);
    std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    item.erase(0, item.find_first_not_of(' '));  // ("0.7, 0.3")
    item.erase(item.find_last_not_of(' ') + 1);
    int64_t m = 0, e = 0;
    OOMB_CHECK(read_decimal(item, m, e) && m > 0, "--data-weights {}: '{}' is not a number > 0 written in decimal (one "
               "per --data, comma-separated, e.g. 0.7,0.3; at most 15 significant digits)", s, item);
    read.emplace_back(m, e);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  OOMB_CHECK(read.size() == sources, "--data-weights {}: {} weight{} for {} --data source{}", s, read.size(),
             read.size() == 1 ? "" : "s", sources, sources == 1 ? "" : "s");
  // each m x 10^(e - the least e): whole numbers in the weights' exact ratio
  int64_t least = read[0].second;
  for (const auto& [m, e] : read) least = std::min(least, e);
  std::vector<int64_t> w;
  for (const auto& [m, e] : read) {
    int64_t x = m;
    for (int64_t k = least; k < e; ++k) {  // (stops at the 16th digit: a span of 2^20 fails at once)
      OOMB_CHECK(x <= kMaxDataWeight / 10, "--data-weights {}: the weights span more than 15 digits (their ratio "
                 "is kept exactly)", s);
      x *= 10;
    }
    w.push_back(x);
  }
  return lowest_terms(w);
}

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

HeldOut open_held_out(const std::vector<std::string>& paths, const std::function<DataOptions(const std::string&)>& options,
                      int64_t vocab, int64_t N, int64_t windows, int64_t dp, int32_t sep, const std::string& when,
                      std::ostream& out) {
  HeldOut h;
  std::vector<WindowSet> sets;
  for (const std::string& p : paths) {
    auto data = open_training_data(p, vocab, options(p));
    const int64_t fit = data->windows_per_epoch(N);
    const int64_t w = windows > 0 ? windows : std::max(dp, fit / dp * dp);
    check_eval_windows(w, dp);  // (before the model is built)
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
    h.windows += w;
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
