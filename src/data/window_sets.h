// Held-out sets scored together (`oomb train --eval-data A --eval-data B`, `oomb eval --data A
// --data B`): the first windows of each set, the sets laid end to end, so that window w is set s's
// window w - (the windows of the sets before s). The trainer and oomb eval score them as one run of
// windows (the dp ranks sharing them as before) and report each set's loss by source_of.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/packed_tokens.h"
#include "data/routed_tokens.h"

namespace oomb {

struct WindowSet {
  std::unique_ptr<PackedTokens> data;
  std::string path;      // as given
  int64_t windows = 0;   // > 0: its windows 0 .. windows - 1
};

class WindowSets final : public RoutedTokens {
 public:
  explicit WindowSets(std::vector<WindowSet> sets);
  std::string describe() const override;
  // Window w: its set, and that set's own window index.
  std::pair<int, int64_t> locate(int64_t w) const;
  int64_t windows() const { return start_.back(); }  // every set's

 private:
  std::pair<int, int64_t> route(int64_t w) override { return locate(w); }
  PackedTokens& part(int s) override { return *sets_[size_t(s)].data; }
  std::vector<WindowSet> sets_;
  std::vector<int64_t> start_;  // set s's first window; start_.back(): the total
};

}  // namespace oomb
