// The demo's generated long-range task: the second half of every window repeats its first half
// (random tokens). Predicting the repeat needs attention reaching N/2 tokens back; only the
// repeated half is trained and scored, and held-out windows use fresh random tokens.
#pragma once
#include <cstdint>

#include "data/token_source.h"

namespace oomb {

class RepeatTask final : public TokenSource {
 public:
  RepeatTask(uint64_t seed, int64_t vocab);
  int64_t vocab() const { return vocab_; }
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override;
  std::string describe() const override;

 private:
  uint64_t seed_;
  int64_t vocab_;
};

}  // namespace oomb
