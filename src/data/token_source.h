// Sources of training windows: N input ids and their N next-token targets (target < 0 = ignored).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace oomb {

// Whether the target after input `id` counts in the loss: not ignored (>= 0), and under --doc-mask
// (sep >= 0, the documents' separator) not across a document's end: the next document is not
// predictable from this one. (The model's inputs apply it: model/chunk_inputs.)
inline bool counted_target(int32_t id, int32_t target, int32_t sep) { return target >= 0 && (sep < 0 || id != sep); }

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Tokens [t0, t0 + n) of window w (from 0) of N tokens: ids and their next-token targets.
  virtual void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) = 0;
  void window(int64_t w, int64_t N, int32_t* ids, int32_t* targets) { read(w, N, 0, N, ids, targets); }
  // Targets of window w the loss counts (counted_target; the trainer's loss is the mean over a
  // step's). By default read and counted.
  virtual int64_t targets_in(int64_t w, int64_t N, int32_t sep = -1);
  virtual std::string describe() const = 0;
  // A mix of sources (data/mixed_tokens.h): their names, and the one window w is read from; a
  // single source has no names and every window is its 0.
  virtual std::vector<std::string> source_names() const { return {}; }
  virtual int source_of(int64_t /*w*/) { return 0; }
};

}  // namespace oomb
