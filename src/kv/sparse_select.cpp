#include "kv/sparse_select.h"

#include <algorithm>

namespace oomb {

SparseOptions sparse_options(int64_t pages_given, int64_t tile, int64_t sinks, bool shared, const std::string& score,
                             int64_t chunk, int64_t kv_heads) {
  SparseOptions o;
  o.score = page_score_parse(score);
  if (pages_given < 0) return o;  // not given: dense attention
  OOMB_CHECK(pages_given >= 1, "--sparse-pages: must be at least 1 (the earlier pages each query tile reads), got {}",
             pages_given);
  OOMB_CHECK(tile >= 1, "--sparse-tile: must be at least 1, got {}", tile);
  OOMB_CHECK(tile <= chunk, "--sparse-tile {}: larger than the chunk ({} tokens, --chunk-size)", tile, chunk);
  OOMB_CHECK(sinks >= 0, "--sink-pages: must be 0 or more, got {}", sinks);
  OOMB_CHECK(shared || kv_heads <= 64,
             "--sparse-pages: a choice per kv head group supports at most 64 kv heads, the model has {} (use "
             "--sparse-shared)",
             kv_heads);
  o.pages = pages_given;
  o.tile = tile;
  o.sinks = sinks;
  o.shared = shared;
  return o;
}

namespace {
// Chunks of C tokens aligned to the sequence's end (the first may be short), as model/chunk_inputs.
int64_t chunks(int64_t N, int64_t C) { return (N + C - 1) / C; }
int64_t chunk_begin(int64_t N, int64_t C, int64_t t) { return std::max<int64_t>(0, N - (chunks(N, C) - t) * C); }
int64_t tiles_of(int64_t T, int64_t tile) { return (T + tile - 1) / tile; }
}  // namespace

int64_t SparseSelector::record_slots(const SparseOptions& o, const KVShape& kv, int64_t N, int64_t C) {
  int64_t tiles = 0;
  for (int64_t t = 0; t < chunks(N, C); ++t)
    tiles += tiles_of(std::min(N, chunk_begin(N, C, t) + C) - chunk_begin(N, C, t), o.tile);
  return tiles * kv.layers * o.sets(kv.kv_heads) * (1 + o.sinks + o.pages);
}

SparseSelector::Bytes SparseSelector::plan(const SparseOptions& o, const KVShape& kv, int64_t N, int64_t C,
                                           bool record, Tier backend_tier) {
  Bytes b;
  if (!o.on()) return b;
  const int64_t tiles = tiles_of(std::min(C, N), o.tile), S = o.sets(kv.kv_heads);
  const int64_t chosen = tiles * S * o.pages * 4;
  b.backend = tiles * S * kv.pages_for(N) * 4 + chosen;  // scores, top-K
  if (backend_tier != Tier::Host) b.host += chosen;        // top-K's host copy
  b.host += tiles * S * (1 + o.sinks + o.pages) * 4;       // one layer's choice (no record)
  if (record) b.host += record_slots(o, kv, N, C) * 4;
  return b;
}

SparseSelector::SparseSelector(const SparseOptions& o, const KVShape& kv, Backend& be) : o_(o), kv_(kv), be_(be) {}

void SparseSelector::begin_sequence(int64_t N, int64_t C, bool record) {
  C = std::min(C, N);
  const int64_t tiles = tiles_of(C, o_.tile), S = o_.sets(kv_.kv_heads);
  auto resize = [](Buffer& b, Tier tier, int64_t bytes) {
    if (b.bytes() >= size_t(bytes)) return;  // kept: a shorter sequence or evaluation after training
    b.reset();  // the old buffer goes first: the peak is the new one alone
    if (bytes > 0) b = Buffer(tier, Tag::PageMeta, size_t(bytes));
  };
  const int64_t score_bytes = tiles * S * kv_.pages_for(N) * 4;
  resize(scores_, be_.tier(), score_bytes);
  resize(chosen_, be_.tier(), tiles * S * o_.pages * 4);
  if (be_.tier() != Tier::Host) resize(chosen_host_, Tier::Host, tiles * S * o_.pages * 4);
  resize(scratch_, Tier::Host, tiles * S * stride() * 4);
  resize(record_buf_, Tier::Host, record ? record_slots(o_, kv_, N, C) * 4 : 0);
  N_ = N, C_ = C, record_ = record && record_buf_.bytes() > 0;
  pages_ = kv_.pages_for(N);
  chunk_begin_.clear();
  chunk_slot_.clear();
  int64_t at = 0;
  for (int64_t t = 0; t < chunks(N, C); ++t) {
    const int64_t b = chunk_begin(N, C, t), n = std::min(N, b + C) - b;
    chunk_begin_.push_back(b);
    chunk_slot_.push_back(at);
    at += tiles_of(n, o_.tile) * kv_.layers * S * stride();
  }
  const size_t most = size_t(tiles * o_.most_pages(kv_.kv_heads));
  run_pages_.reserve(most);
  run_heads_.reserve(most);
  runs_.reserve(size_t(tiles));
}

int32_t* SparseSelector::slots(int64_t l, int64_t begin, int64_t T) {
  if (!record_) return scratch_.as<int32_t>();
  const auto it = std::lower_bound(chunk_begin_.begin(), chunk_begin_.end(), begin);
  OOMB_CHECK(it != chunk_begin_.end() && *it == begin, "sparse attention: no chunk starts at token {}", begin);
  const size_t t = size_t(it - chunk_begin_.begin());
  const int64_t n = std::min(N_, begin + C_) - begin;
  OOMB_CHECK(T == n, "sparse attention: the chunk at token {} has {} tokens, not {}", begin, n, T);
  return record_buf_.as<int32_t>() + chunk_slot_[t] + l * tiles_of(n, o_.tile) * o_.sets(kv_.kv_heads) * stride();
}

std::span<const SparseRun> SparseSelector::choose(int64_t l, int64_t begin, const Tensor& q, const Tensor& meta,
                                                  int64_t first) {
  const int64_t T = q.dim(0), np = meta.dim(0), S = o_.sets(kv_.kv_heads), tiles = tiles_of(T, o_.tile), K = o_.pages;
  OOMB_CHECK(np <= pages_ && tiles <= tiles_of(C_, o_.tile), "sparse attention: {} pages and {} tiles exceed the sequence's plan",
             np, tiles);
  int32_t* slot = slots(l, begin, T);
  const int64_t rest0 = std::max(first, std::min(o_.sinks, np));  // the first candidate that is not a sink
  const int32_t* top = nullptr;  // (tiles, S, K): the chosen candidates, where there are more than K
  if (np - rest0 > K) {
    Tensor scores(scores_.data(), DType::F32, {tiles, S, np}, be_.tier());
    Tensor chosen(chosen_.data(), DType::I32, {tiles, S, K}, be_.tier());
    if (o_.score == PageScore::Quest)
      be_.page_quest_scores(q, o_.tile, meta, scores);
    else
      be_.page_scores(q, o_.tile, meta, scores);
    be_.page_topk(scores, rest0, chosen);
    top = chosen.as<int32_t>();
    if (be_.tier() != Tier::Host) {  // the runs are built on the host: only the indices come down
      be_.copy(chosen_host_.data(), Tier::Host, chosen.data, be_.tier(), chosen.bytes());
      top = chosen_host_.as<int32_t>();
    }
  }
  for (int64_t i = 0; i < tiles; ++i)
    for (int64_t s = 0; s < S; ++s) {
      int32_t* out = slot + (i * S + s) * stride();
      int32_t n = 0;
      for (int64_t p = first; p < rest0; ++p) out[1 + n++] = int32_t(p);  // sinks
      if (top)
        for (int64_t j = 0; j < K; ++j) {  // ascending
          const int32_t p = top[(i * S + s) * K + j];
          OOMB_CHECK(p >= rest0 && p < np, "sparse attention: page_topk chose page {} outside the candidates [{}, {})", p,
                     rest0, np);
          out[1 + n++] = p;
        }
      else
        for (int64_t p = rest0; p < np; ++p) out[1 + n++] = int32_t(p);
      out[0] = n;
    }
  return runs(slot, T);
}

std::span<const SparseRun> SparseSelector::recall(int64_t l, int64_t begin, int64_t T) {
  OOMB_CHECK(record_, "sparse attention: recall without a recorded forward sweep");
  return runs(slots(l, begin, T), T);
}

std::vector<int64_t> SparseSelector::recorded(int64_t l, int64_t begin, int64_t tile, int64_t s) const {
  auto* self = const_cast<SparseSelector*>(this);
  const auto it = std::lower_bound(chunk_begin_.begin(), chunk_begin_.end(), begin);
  OOMB_CHECK(it != chunk_begin_.end() && *it == begin, "sparse attention: no chunk starts at token {}", begin);
  const int64_t n = std::min(N_, begin + C_) - begin;
  const int32_t* out = self->slots(l, begin, n) + (tile * o_.sets(kv_.kv_heads) + s) * stride();
  return std::vector<int64_t>(out + 1, out + 1 + out[0]);
}

// The tiles' choices as runs: per tile the union of its sets' pages (ascending) with the groups
// reading each; consecutive tiles with the same pages and groups merge into one run.
std::span<const SparseRun> SparseSelector::runs(const int32_t* slot, int64_t T) {
  const int64_t S = o_.sets(kv_.kv_heads), tiles = tiles_of(T, o_.tile);
  runs_.clear();
  run_pages_.clear();
  run_heads_.clear();
  std::vector<std::pair<size_t, size_t>>& at = at_;  // per run: first page, count
  at.clear();
  for (int64_t i = 0; i < tiles; ++i) {
    const size_t start = run_pages_.size();
    for (int64_t s = 0; s < S; ++s) {
      const int32_t* out = slot + (i * S + s) * stride();
      run_pages_.insert(run_pages_.end(), out + 1, out + 1 + out[0]);
    }
    std::sort(run_pages_.begin() + ptrdiff_t(start), run_pages_.end());
    run_pages_.erase(std::unique(run_pages_.begin() + ptrdiff_t(start), run_pages_.end()), run_pages_.end());
    run_heads_.resize(run_pages_.size(), S == 1 ? ~uint64_t(0) : 0);
    if (S > 1)
      for (int64_t s = 0; s < S; ++s) {
        const int32_t* out = slot + (i * S + s) * stride();
        for (int32_t j = 1; j <= out[0]; ++j) {
          const auto pos = std::lower_bound(run_pages_.begin() + ptrdiff_t(start), run_pages_.end(), int64_t(out[j]));
          run_heads_[size_t(pos - run_pages_.begin())] |= uint64_t(1) << s;
        }
      }
    const size_t n = run_pages_.size() - start;
    const int64_t q0 = i * o_.tile, q1 = std::min(T, q0 + o_.tile);
    if (!at.empty()) {
      auto& prev = at.back();
      if (prev.second == n && std::equal(run_pages_.begin() + ptrdiff_t(prev.first),
                                         run_pages_.begin() + ptrdiff_t(prev.first + n), run_pages_.begin() + ptrdiff_t(start)) &&
          std::equal(run_heads_.begin() + ptrdiff_t(prev.first), run_heads_.begin() + ptrdiff_t(prev.first + n),
                     run_heads_.begin() + ptrdiff_t(start))) {  // the same pages as the tile before: one run
        runs_.back().q1 = q1;
        run_pages_.resize(start);
        run_heads_.resize(start);
        continue;
      }
    }
    at.push_back({start, n});
    runs_.push_back({q0, q1, {}, {}});
  }
  for (size_t r = 0; r < runs_.size(); ++r) {
    runs_[r].pages = std::span<const int64_t>(run_pages_.data() + at[r].first, at[r].second);
    runs_[r].heads = std::span<const uint64_t>(run_heads_.data() + at[r].first, at[r].second);
  }
  return runs_;
}

}  // namespace oomb
