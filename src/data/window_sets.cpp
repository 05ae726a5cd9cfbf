#include "data/window_sets.h"

#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

WindowSets::WindowSets(std::vector<WindowSet> sets) : sets_(std::move(sets)) {
  OOMB_CHECK(!sets_.empty(), "held-out sets: none given");
  start_.push_back(0);
  for (const WindowSet& s : sets_) {
    OOMB_CHECK(s.data && s.windows > 0, "held-out set {}: no windows to score", s.path);
    start_.push_back(start_.back() + s.windows);
    names_.push_back(s.path);
  }
}

std::pair<int, int64_t> WindowSets::locate(int64_t w) const {
  OOMB_CHECK(w >= 0 && w < windows(), "held-out sets: window {} is beyond their {}", w, windows());
  const size_t s = size_t(std::upper_bound(start_.begin(), start_.end(), w) - start_.begin()) - 1;
  return {int(s), w - start_[s]};
}

std::string WindowSets::describe() const {
  std::string out = fmt::format("{} held-out sets", sets_.size());
  for (size_t s = 0; s < sets_.size(); ++s)
    out += fmt::format("{} {} windows of {}", s == 0 ? ":" : ";", sets_[s].windows, sets_[s].data->describe());
  return out;
}

}  // namespace oomb
