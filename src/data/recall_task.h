// A generated long-range task for the demo: key/value pairs planted at the start of a long context,
// filler in between, queries at the end. Only the answers to queries are trained and scored.
#pragma once
#include <cstdint>

#include "data/token_source.h"

namespace oomb {

class RecallTask final : public TokenSource {
 public:
  // Token ids: 0 = query marker, [1, 16) filler, [16, 16+keys) keys, then `values` value ids.
  RecallTask(uint64_t seed, int64_t pairs = 8, int64_t keys = 48, int64_t values = 64);
  int64_t vocab() const { return 16 + keys_ + values_; }
  int64_t min_length() const { return 2 * pairs_ + 3 * pairs_ + 1; }
  void window(int64_t w, int64_t N, int32_t* ids, int32_t* targets) override;
  std::string describe() const override;

 private:
  uint64_t seed_;
  int64_t pairs_, keys_, values_;
};

}  // namespace oomb
