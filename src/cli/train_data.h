// oomb train's --data: one source, or a mix of several (--data given once per source, with
// --data-weights; data/mixed_tokens.h), and what the run prints and checkpoints of it.
#pragma once
#include <functional>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "data/mix_weights.h"
#include "data/mixed_tokens.h"
#include "data/open_data.h"
#include "data/window_sets.h"
#include "train/checkpoint_state.h"

namespace oomb::cli {

struct TrainData {
  std::unique_ptr<PackedTokens> one;  // a single source
  std::unique_ptr<MixedTokens> mix;   // or a mix
  TokenSource& source() { return mix ? static_cast<TokenSource&>(*mix) : *one; }
  std::string describe() const { return mix ? mix->describe() : one->describe(); }
  // The checkpoint's identity of the data: one source's path, tokens and fingerprint; a mix's paths
  // joined by " + ", their tokens and the fingerprint of their fingerprints in order.
  DataIdentity identity(const std::vector<std::string>& paths) const;
  // Where window w of N starts (state.json's epoch and epoch_position, or a mix's sources).
  void position(int64_t w, int64_t N, CheckpointState& st);
  // A mix's weights in lowest terms ("3,1" for 0.6,0.2), as the checkpoint's flags record them;
  // empty with one source.
  std::string weights_flag() const;
  // Notes before training: a source shorter than one window (the sequence wraps); --packing whole's
  // summary; a mix's share of each source over the run's `windows`, and the epochs that are of it.
  void notes(int64_t N, int64_t windows, std::ostream& out);
};

// oomb train's --eval-data: one held-out set, or several (given more than once; data/window_sets.h).
struct HeldOut {
  std::unique_ptr<PackedTokens> one;
  std::unique_ptr<WindowSets> sets;
  std::vector<int64_t> set_windows;  // each set's windows
  int64_t windows() const { return std::accumulate(set_windows.begin(), set_windows.end(), int64_t(0)); }  // every set's
  TokenSource* source() { return sets ? static_cast<TokenSource*>(sets.get()) : one.get(); }
};
// Opens each path (options(path): how it is read) over its windows of N (--eval-windows: one count
// for every set or one per set; none: its whole windows, at least one, a multiple of dp), checks each
// holds a target to score (sep: the --doc-mask separator or -1) and prints what is scored `when`.
HeldOut open_held_out(const std::vector<std::string>& paths, const std::function<DataOptions(const std::string&)>& options,
                      int64_t vocab, int64_t N, const std::vector<int64_t>& windows, int64_t dp, int32_t sep,
                      const std::string& when, std::ostream& out);

// Opens each path as open_training_data does (source i shuffled with its own seed, from
// o.packing.seed); two or more make a mix by `weights` (--data-weights: one number > 0 per path,
// comma-separated; empty: each source's tokens).
TrainData open_train_data(const std::vector<std::string>& paths, const std::string& weights, int64_t vocab,
                          const DataOptions& o);


}  // namespace oomb::cli
