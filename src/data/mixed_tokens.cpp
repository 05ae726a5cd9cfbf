#include "data/mixed_tokens.h"

#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"
#include "core/fnv.h"

namespace oomb {

MixedTokens::MixedTokens(std::vector<MixSource> sources) : sources_(std::move(sources)) {
  OOMB_CHECK(sources_.size() >= 2, "a mix of data needs two sources or more, got {}", sources_.size());
  OOMB_CHECK(sources_.size() <= 1024, "--data: {} sources are more than a mix takes (1024)", sources_.size());
  for (const MixSource& s : sources_) {
    OOMB_CHECK(s.data, "--data {}: not opened", s.path);
    names_.push_back(s.path);
    OOMB_CHECK(s.weight > 0 && s.weight <= (int64_t(1) << 62) - total_, "--data-weights: {}'s weight {} is not "
               "above 0, or the weights pass 2^62 in all", s.path, s.weight);
    total_ += s.weight;
  }
  count_.assign(sources_.size(), 0);
}

void MixedTokens::advance() {
  if (next_ % kEvery == 0 && next_ / kEvery == int64_t(saved_.size())) saved_.push_back(count_);
  // among the sources below their share at this window's end, c_s P < p_s (n + 1) (one at least:
  // those shares less the counts sum to 1), the earliest due next window: (c_s + 1) / p_s least
  int best = -1;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const __int128 p = sources_[s].weight, c = count_[s];
    if (c * total_ >= p * (next_ + 1)) continue;
    if (best < 0 || (c + 1) * sources_[size_t(best)].weight < (__int128(count_[size_t(best)]) + 1) * p) best = int(s);
  }
  ++count_[size_t(best)];
  last_source_ = best;
  ++next_;
}

std::pair<int, int64_t> MixedTokens::locate(int64_t w) {
  OOMB_CHECK(w >= 0, "data: window {} is negative", w);
  if (w >= total_) {  // (the same choices, every count p_s more a period)
    const auto [s, k] = locate(w % total_);
    return {s, k + w / total_ * sources_[size_t(s)].weight};
  }
  if (w < next_ - 1) {  // back to the counts saved at or before w
    const int64_t i = std::min<int64_t>(w / kEvery, int64_t(saved_.size()) - 1);
    count_ = saved_[size_t(i)];
    next_ = i * kEvery;
    last_source_ = -1;
  }
  while (next_ <= w) advance();
  return {last_source_, count_[size_t(last_source_)] - 1};
}

std::vector<int64_t> MixedTokens::windows_before(int64_t w) {
  OOMB_CHECK(w >= 0, "data: window {} is negative", w);
  std::vector<int64_t> c(sources_.size(), 0);
  if (w % total_ > 0) {
    locate(w % total_ - 1);
    c = count_;
  }
  for (size_t s = 0; s < c.size(); ++s) c[s] += w / total_ * sources_[s].weight;
  return c;
}

std::string MixedTokens::describe() const {
  std::string out = fmt::format("a mix of {} sources", sources_.size());
  for (size_t s = 0; s < sources_.size(); ++s)
    out += fmt::format("{} {:.4g}% of the windows: {}", s == 0 ? ":" : ";", 100 * share(int(s)),
                       sources_[s].data->describe());
  return out;
}

std::string MixedTokens::fingerprint() const {
  Fnv f;
  f.mix(uint64_t(sources_.size()));
  for (const MixSource& s : sources_) f.mix(data_fingerprint(s.data->store(), s.data->mask()));
  return f.hex();
}

int64_t MixedTokens::tokens() const {
  int64_t n = 0;
  for (const MixSource& s : sources_) n += s.data->store().size();
  return n;
}

}  // namespace oomb
