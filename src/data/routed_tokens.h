// A TokenSource whose window w is window k of one of several packed sources (a mix of data,
// data/mixed_tokens.h; held-out sets, data/window_sets.h): route(w) names the source and k, and
// reading, counting targets and source_of follow it.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/packed_tokens.h"

namespace oomb {

class RoutedTokens : public TokenSource {
 public:
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override {
    const auto [s, k] = route(w);
    part(s).read(k, N, t0, n, ids, targets);
  }
  int64_t targets_in(int64_t w, int64_t N, int32_t sep = -1) override {
    const auto [s, k] = route(w);
    return part(s).targets_in(k, N, sep);
  }
  int source_of(int64_t w) override { return route(w).first; }
  std::vector<std::string> source_names() const override { return names_; }

 protected:
  // Window w: its source, and that source's own window index.
  virtual std::pair<int, int64_t> route(int64_t w) = 0;
  virtual PackedTokens& part(int s) = 0;
  std::vector<std::string> names_;  // each source's path as given
};

}  // namespace oomb
