// Sources of training windows: N input ids and their N next-token targets (target < 0 = ignored).
#pragma once
#include <cstdint>
#include <string>

namespace oomb {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Tokens [t0, t0 + n) of window w (from 0) of N tokens: ids and their next-token targets.
  virtual void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) = 0;
  void window(int64_t w, int64_t N, int32_t* ids, int32_t* targets) { read(w, N, 0, N, ids, targets); }
  virtual std::string describe() const = 0;
};

}  // namespace oomb
