// make_sim_backend's copy delay without end (backend.h), for either copy stream.
#pragma once
#include <cstdint>
#include <limits>

namespace oomb {

// Each asynchronous copy waits until something waits for it (the host, or the other copy stream) or
// for a later one on its stream: a missing wait reads memory the copy has not written, or the copy
// reads memory already overwritten, however loaded the machine (a finite delay's race can be lost).
inline constexpr int64_t kHoldCopies = std::numeric_limits<int64_t>::max();

}  // namespace oomb
