// Held-out evaluation (oomb eval): mean loss, perplexity and accuracy over windows of N tokens,
// run chunk-recurrently like training (so it reaches any length training reaches), and the loss
// by position: the N positions cut into equal buckets, each bucket's mean loss over every window.
// Each bucket is a whole number of chunks (eval_chunk_size), so the model's running sums, read
// after every chunk, give each bucket's sums exactly. Held-out sets laid end to end
// (data/window_sets.h: `oomb eval --data A --data B`) are scored as one run of windows, each set's
// sums kept apart too, so that the whole is the loss over every set's targets.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "data/token_source.h"
#include "train/model.h"

namespace oomb {

struct PositionBucket {
  int64_t begin = 0, end = 0;  // positions [begin, end) of the window
  double loss_sum = 0;
  int64_t targets = 0, correct = 0;
  double loss() const;  // mean, NaN when the bucket has no targets
};

struct EvalResult {
  int64_t seq_len = 0, windows = 0, chunk = 0;
  double loss_sum = 0;
  int64_t targets = 0, correct = 0;
  std::vector<PositionBucket> buckets;
  std::vector<EvalResult> sets;  // with several sets (the data's source_names): each set's own, in order
  double loss() const;        // mean cross-entropy (nats per target)
  double perplexity() const;  // exp(loss)
  double accuracy() const;    // argmax hits per target
};

// The largest chunk size <= max_chunk dividing N / buckets (N must be a multiple of buckets;
// the error names --buckets).
int64_t eval_chunk_size(int64_t N, int64_t buckets, int64_t max_chunk);

// Windows 0 .. windows-1 of N tokens from data; the model's chunk must be eval_chunk_size's.
// Progress (one line per window) goes to log when given. With several data-parallel ranks, rank
// `first` of `stride` scores windows first, first + stride, ... (eval_sums: what the ranks add).
// Sums go in window order, as oomb train's held-out loss adds them, so the two agree bit for bit on
// one rank (over ranks each adds its windows in order, and the all-reduce the ranks' sums).
EvalResult evaluate_by_position(Model& model, TokenSource& data, int64_t N, int64_t windows, int64_t buckets,
                                std::ostream* log = nullptr, int64_t first = 0, int64_t stride = 1);
// The sums of a result (loss, targets, correct: overall, then per bucket; then each set's the same
// way) in one flat vector, and back.
std::vector<double> eval_sums(const EvalResult& r);
void set_eval_sums(EvalResult& r, const std::vector<double>& sums);

nlohmann::json to_json(const EvalResult& r);
// A table of the buckets for people.
std::string format_table(const EvalResult& r);

}  // namespace oomb
