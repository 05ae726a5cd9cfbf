#include "train/eval.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "core/error.h"

namespace oomb {

static double mean(double sum, int64_t n) { return n > 0 ? sum / double(n) : std::numeric_limits<double>::quiet_NaN(); }

double PositionBucket::loss() const { return mean(loss_sum, targets); }
double EvalResult::loss() const { return mean(loss_sum, targets); }
double EvalResult::perplexity() const { return std::exp(loss()); }
double EvalResult::accuracy() const { return mean(double(correct), targets); }

int64_t eval_chunk_size(int64_t N, int64_t buckets, int64_t max_chunk) {
  OOMB_CHECK(buckets >= 1 && buckets <= N, "--buckets {}: must be between 1 and --seq-len ({})", buckets, N);
  OOMB_CHECK(N % buckets == 0, "--buckets {}: must divide --seq-len {} (each bucket is N / buckets positions)",
             buckets, N);
  const int64_t width = N / buckets;
  for (int64_t c = std::min(max_chunk, width); c > 1; --c)
    if (width % c == 0) return c;
  return 1;
}

EvalResult evaluate_by_position(Model& model, TokenSource& data, int64_t N, int64_t windows, int64_t buckets,
                                std::ostream* log, int64_t first, int64_t stride) {
  const int64_t C = model.plan().chunk, width = N / buckets;
  OOMB_CHECK(N % buckets == 0 && width % C == 0, "eval: the chunk size {} must divide the bucket width {}", C, width);
  OOMB_CHECK(windows >= 1, "eval: at least one window, got {}", windows);
  EvalResult r;
  r.seq_len = N, r.windows = windows, r.chunk = C;
  r.buckets.resize(size_t(buckets));
  for (int64_t b = 0; b < buckets; ++b) r.buckets[size_t(b)].begin = b * width, r.buckets[size_t(b)].end = (b + 1) * width;
  const std::vector<std::string> names = data.source_names();
  const size_t sets = names.size();
  if (sets > 1) {
    r.sets.assign(sets, r);
    for (EvalResult& s : r.sets) s.windows = 0;
    for (int64_t w = 0; w < windows; ++w) ++r.sets[size_t(data.source_of(w))].windows;
  }
  for (int64_t w = first; w < windows; w += stride) {
    const size_t s_of_w = sets > 1 ? size_t(data.source_of(w)) : 0;
    EvalResult* set = sets > 1 ? &r.sets[s_of_w] : nullptr;
    const ChunkReader read = [&](int64_t t0, int64_t n, int32_t* ids, int32_t* tg) { data.read(w, N, t0, n, ids, tg); };
    LossStats prev;
    const LossStats st = model.evaluate(read, N, [&](ChunkSpan c, const LossStats& s) {
      for (EvalResult* into : {&r, set}) {
        if (!into) continue;
        PositionBucket& b = into->buckets[size_t(c.begin / width)];
        b.loss_sum += s.loss_sum - prev.loss_sum;
        b.targets += s.targets - prev.targets;
        b.correct += s.correct - prev.correct;
      }
      prev = s;
    });
    for (EvalResult* into : {&r, set})
      if (into) into->loss_sum += st.loss_sum, into->targets += st.targets, into->correct += st.correct;
    if (log)
      *log << fmt::format("window {}/{}{}: loss {:.4f} over {} targets", w + 1, windows,
                          set ? " (" + names[s_of_w] + ")" : "", mean(st.loss_sum, st.targets),
                          st.targets)
           << std::endl;
  }
  return r;
}

std::vector<double> eval_sums(const EvalResult& r) {
  std::vector<double> v = {r.loss_sum, double(r.targets), double(r.correct)};
  for (const PositionBucket& b : r.buckets) v.insert(v.end(), {b.loss_sum, double(b.targets), double(b.correct)});
  for (const EvalResult& s : r.sets) {
    const std::vector<double> sv = eval_sums(s);
    v.insert(v.end(), sv.begin(), sv.end());
  }
  return v;
}

void set_eval_sums(EvalResult& r, const std::vector<double>& v) {
  const size_t own = 3 * (r.buckets.size() + 1);
  OOMB_CHECK(v.size() == own * (r.sets.size() + 1), "eval: {} sums for {} buckets and {} sets", v.size(),
             r.buckets.size(), r.sets.size());
  r.loss_sum = v[0], r.targets = int64_t(v[1]), r.correct = int64_t(v[2]);
  for (size_t i = 0; i < r.buckets.size(); ++i) {
    PositionBucket& b = r.buckets[i];
    b.loss_sum = v[3 * i + 3], b.targets = int64_t(v[3 * i + 4]), b.correct = int64_t(v[3 * i + 5]);
  }
  for (size_t s = 0; s < r.sets.size(); ++s)
    set_eval_sums(r.sets[s], std::vector<double>(v.begin() + std::ptrdiff_t(own * (s + 1)),
                                                 v.begin() + std::ptrdiff_t(own * (s + 2))));
}

// JSON has no NaN: an empty bucket's loss is null.
static nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json to_json(const EvalResult& r) {
  nlohmann::json b = nlohmann::json::array();
  for (const PositionBucket& x : r.buckets)
    b.push_back({{"begin", x.begin}, {"end", x.end}, {"loss", number(x.loss())}, {"targets", x.targets},
                 {"accuracy", number(mean(double(x.correct), x.targets))}});
  nlohmann::json j = {{"seq_len", r.seq_len},       {"windows", r.windows},   {"chunk_size", r.chunk},
                      {"targets", r.targets},       {"loss", number(r.loss())}, {"perplexity", number(r.perplexity())},
                      {"accuracy", number(r.accuracy())}, {"loss_by_position", b}};
  if (!r.sets.empty()) {
    j["sets"] = nlohmann::json::array();
    for (const EvalResult& s : r.sets) j["sets"].push_back(to_json(s));
  }
  return j;
}

std::string format_table(const EvalResult& r) {
  std::string s = fmt::format("{:>9} {:>9} {:>9} {:>9} {:>9}\n", "from", "to", "targets", "loss", "accuracy");
  for (const PositionBucket& b : r.buckets)
    s += fmt::format("{:>9} {:>9} {:>9} {:>9.4f} {:>8.1f}%\n", b.begin, b.end, b.targets, b.loss(),
                     100 * mean(double(b.correct), b.targets));
  return s;
}

}  // namespace oomb
