// Training windows from several sources in fixed proportions (`--data A --data B --data-weights
// 0.7,0.3`): each window is one source's next window, whole (a long-context window of short
// documents stays a window of short documents, as ProLong mixes them). With shares w_s = p_s / P
// (whole weights p_s, P their sum) and c_s windows of source s before window n, window n goes,
// among the sources that would still not be ahead of their share after it (c_s < w_s (n + 1)), to
// the one whose next window is due first ((c_s + 1) / w_s), the first on a tie: earliest deadline
// first over Pfair's subtask windows (Baruah et al. 1996; Tijdeman's chairman assignment), which
// keeps every prefix of the run within one window of each share, for any number of sources (the
// largest-deficit rule of Megatron's blended datasets drifts past one with four or more). No
// generator: window n's source is a function of n and the weights alone, so that a checkpoint's
// window count restores the mix. The rule runs in integers (data/mix_weights.h reads decimal weights
// exactly into whole ones in lowest terms): 0.6,0.2 and 3,1 are the same mix to the bit. Each
// source keeps its own packing, shuffling, epochs and loss mask.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/packed_tokens.h"
#include "data/routed_tokens.h"

namespace oomb {

struct MixSource {
  std::unique_ptr<PackedTokens> data;
  std::string path;  // as given
  int64_t weight = 0;  // > 0 (the mix's weights: at most 2^62 in all)
};

class MixedTokens final : public RoutedTokens {
 public:
  explicit MixedTokens(std::vector<MixSource> sources);
  std::string describe() const override;

  // Window w of the mix: its source, and that source's own window index. The mix repeats every P
  // windows (at P each source has given exactly p_s), so w beyond P is w mod P, w / P periods on.
  std::pair<int, int64_t> locate(int64_t w);
  // Windows each source gave to windows [0, w) of the mix.
  std::vector<int64_t> windows_before(int64_t w);
  int sources() const { return int(sources_.size()); }
  PackedTokens& source(int s) { return *sources_[size_t(s)].data; }
  const std::string& path(int s) const { return sources_[size_t(s)].path; }
  int64_t weight(int s) const { return sources_[size_t(s)].weight; }
  double share(int s) const { return double(sources_[size_t(s)].weight) / double(total_); }  // p_s / P
  // The checkpoint's identity of the mix: the sources' fingerprints (data_fingerprint), in order.
  std::string fingerprint() const;
  int64_t tokens() const;  // every source's store

 private:
  std::pair<int, int64_t> route(int64_t w) override { return locate(w); }
  PackedTokens& part(int s) override { return source(s); }
  void advance();  // assigns window next_

  std::vector<MixSource> sources_;
  int64_t total_ = 0;  // P
  // the walk's cursor: windows [0, next_) assigned, count_[s] of them to s; window next_ - 1 is
  // (last_source_, count_[last_source_] - 1). locate() walks on, or for an earlier window from the
  // counts saved every kEvery windows (a step's windows are read twice: counted, then trained).
  static constexpr int64_t kEvery = 1024;
  int64_t next_ = 0;
  std::vector<int64_t> count_;
  int last_source_ = -1;
  std::vector<std::vector<int64_t>> saved_;  // saved_[i]: count_ at window i * kEvery
};

}  // namespace oomb
