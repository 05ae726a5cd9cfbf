// --packing whole: windows of whole documents (data/packed_tokens.h).
#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"
#include "data/packed_tokens.h"

namespace oomb {

const PackedTokens::Layout& PackedTokens::layout(int64_t e, int64_t N) {
  if (!o_.shuffle) e = 0;  // every epoch the same
  for (Layout& c : layouts_)
    if (c.epoch == e && c.N == N) return c;
  Layout& c = layouts_[size_t(e & 1)];
  c.epoch = e, c.N = N;
  c.start.clear(), c.used.clear();
  const std::vector<int64_t>& end = epoch(e).end;  // document k of the epoch: [end[k - 1], end[k])
  const int64_t D = int64_t(end.size()), room = N + 1;
  for (int64_t k = 0; k < D;) {
    const int64_t begin = k ? end[size_t(k) - 1] : 0, len = end[size_t(k)] - begin;
    if (len > room) {  // windows of its own, at offsets 0, N, 2N, ...: each target read once
      for (int64_t off = 0;; off += N) {
        c.start.push_back(begin + off), c.used.push_back(std::min(room, len - off));
        if (off + room >= len) break;
      }
      ++k;
      continue;
    }
    int64_t used = 0;  // whole documents while they fit
    for (; k < D; ++k) {
      const int64_t l = end[size_t(k)] - (k ? end[size_t(k) - 1] : 0);
      if (used + l > room) break;
      used += l;
    }
    c.start.push_back(begin), c.used.push_back(used);
  }
  return c;
}

std::pair<int64_t, int64_t> PackedTokens::locate(int64_t w, int64_t N) {
  OOMB_CHECK(w >= 0, "--data: window {} is negative", w);
  if (!o_.shuffle) {
    const int64_t W = int64_t(layout(0, N).start.size());
    return {w / W, w % W};
  }
  if (first_window_N_ != N) first_window_ = {0}, first_window_N_ = N;
  while (first_window_.back() <= w) {  // the epochs before w's, each laid out once
    const int64_t e = int64_t(first_window_.size()) - 1;
    first_window_.push_back(first_window_.back() + int64_t(layout(e, N).start.size()));
  }
  const int64_t e = int64_t(std::upper_bound(first_window_.begin(), first_window_.end(), w) - first_window_.begin()) - 1;
  return {e, w - first_window_[size_t(e)]};
}

void PackedTokens::read_whole(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) {
  const auto [e, j] = locate(w, N);
  const Layout& lay = layout(e, N);
  const int64_t start = lay.start[size_t(j)], used = lay.used[size_t(j)];
  int64_t p = 0;  // the window's first stream position, e * length_ + start, checked
  OOMB_CHECK(!__builtin_mul_overflow(e, length_, &p) && !__builtin_add_overflow(p, start, &p) &&
                 !__builtin_add_overflow(p, N + 1, &p),
             "--data {}: window {} of {} tokens lies beyond 2^63 tokens of the stream", store_->describe(), w, N);
  p = e * length_ + start;
  // tokens [t0, t0 + n] of the window: the documents', then padding (EOS ids, not trained)
  const int64_t real = std::clamp<int64_t>(used - t0, 0, n + 1);
  buf_.resize(size_t(n + 1));
  mask_buf_.resize(size_t(n + 1));
  if (real > 0) {
    stream(p + t0, real, buf_.data());
    stream_mask(p + t0, real, mask_buf_.data());
  }
  std::fill(buf_.begin() + real, buf_.end(), uint32_t(o_.eos));
  std::fill(mask_buf_.begin() + real, mask_buf_.end(), uint8_t(0));
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = int32_t(buf_[size_t(i)]);
    targets[i] = mask_buf_[size_t(i) + 1] ? int32_t(buf_[size_t(i) + 1]) : -1;
  }
}

WholePacking PackedTokens::whole_packing(int64_t N) {
  const Layout& lay = layout(0, N);
  WholePacking s;
  s.windows = int64_t(lay.start.size());
  s.documents = int64_t(epoch(0).end.size());
  const std::vector<int64_t>& end = epoch(0).end;
  for (size_t k = 0; k < end.size(); ++k) s.split += end[k] - (k ? end[k - 1] : 0) > N + 1;
  for (int64_t u : lay.used) s.padding += N + 1 - u;
  return s;
}

std::pair<int64_t, int64_t> PackedTokens::position_of(int64_t w, int64_t N) {
  if (o_.whole) {
    const auto [e, j] = locate(w, N);
    return {e, layout(e, N).start[size_t(j)]};
  }
  const unsigned __int128 p = (unsigned __int128)(w) * (unsigned __int128)(N);
  return {int64_t(p / (unsigned __int128)length_), int64_t(p % (unsigned __int128)length_)};
}

int64_t PackedTokens::windows_per_epoch(int64_t N) {
  return std::max<int64_t>(1, o_.whole ? whole_packing(N).windows : (length_ - 1) / N);
}

std::string PackedTokens::whole_summary(int64_t N) {
  const WholePacking s = whole_packing(N);
  return fmt::format("--packing whole: {} documents in {} windows of {} tokens an epoch{}, {:.1f}% of their tokens "
                     "padding{}", s.documents, s.windows, N, o_.shuffle ? " (the first; each epoch packs its own order)" : "",
                     100.0 * double(s.padding) / double(s.windows * (N + 1)),
                     s.split ? fmt::format("; {} document{} longer than a window, each over windows of its own", s.split,
                                           s.split == 1 ? "" : "s")
                             : "");
}

}  // namespace oomb
