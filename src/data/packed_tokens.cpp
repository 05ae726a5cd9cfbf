#include "data/packed_tokens.h"

#include <algorithm>
#include <fmt/format.h>
#include <numeric>
#include <random>

#include "core/error.h"

namespace oomb {

PackedTokens::PackedTokens(std::unique_ptr<TokenStore> store, int64_t vocab, const PackingOptions& o,
                           std::unique_ptr<LossMask> mask)
    : store_(std::move(store)), mask_(std::move(mask)), vocab_(vocab), o_(o) {
  const int64_t n = store_->size();
  OOMB_CHECK(n >= 1, "--data {}: holds no tokens", store_->describe());
  OOMB_CHECK(!mask_ || mask_->size() == n, "--data {}: its loss mask has {} bits for {} tokens", store_->describe(),
             mask_ ? mask_->size() : 0, n);
  OOMB_CHECK(!mask_ || mask_->trained() > 0, "--data {}: none of its {} tokens is trained (every one is a prompt's, "
             "or not an assistant's): there is nothing to learn; check the fields (--completion-field, "
             "--messages-field) or the chat template", store_->describe(), n);
  // every id against the vocabulary now, at memory speed, not when training reaches it hours later
  uint32_t bad = 0;
  const int64_t at = vocab < int64_t(UINT32_MAX) ? store_->find_at_least(uint32_t(vocab), &bad) : -1;
  OOMB_CHECK(at < 0, "--data {}: token id {} is beyond the model's vocabulary ({})", store_->where(at), bad, vocab);
  length_ = n;
  if (!o.shuffle && !o.separate && !o.whole) {
    OOMB_CHECK(n >= 2, "--data {}: holds {} token; training needs at least 2", store_->describe(), n);
    return;
  }
  OOMB_CHECK(o.eos >= 0, "--{} needs the EOS id that separates documents (from the model's config.json "
             "eos_token_id, or --eos-id)", o.shuffle ? "shuffle" : o.whole ? "packing whole" : "doc-mask");
  uint32_t last = 0;
  store_->get(n - 1, 1, &last);
  virtual_eos_ = last != uint32_t(o.eos);
  length_ = n + virtual_eos_;
  if (!o.shuffle && !o.whole) return;
  // documents: runs ended by EOS (one pass over the store)
  doc_start_.push_back(0);
  std::vector<uint32_t> buf(1 << 16);
  for (int64_t at = 0; at < n; at += int64_t(buf.size())) {
    const int64_t len = std::min<int64_t>(int64_t(buf.size()), n - at);
    store_->get(at, len, buf.data());
    for (int64_t i = 0; i < len; ++i)
      if (buf[size_t(i)] == uint32_t(o.eos) && at + i + 1 < n) doc_start_.push_back(at + i + 1);
  }
  OOMB_CHECK(doc_start_.size() < size_t(INT32_MAX), "--data {}: {} documents are more than it can order",
             store_->describe(), doc_start_.size());
}

std::string PackedTokens::describe() const {
  std::string s = store_->describe();
  if (mask_) s += fmt::format(", {} of its tokens trained (completions and EOS; prompts not)", mask_->trained());
  if (o_.shuffle) s += fmt::format(", {} documents shuffled per epoch (seed {})", doc_start_.size(), o_.seed);
  return s;
}

const PackedTokens::Epoch& PackedTokens::epoch(int64_t e) {
  for (Epoch& c : cache_)
    if (c.index == e) return c;
  Epoch& c = cache_[size_t(e & 1)];
  c.index = e;
  const int64_t D = int64_t(doc_start_.size());
  c.order.resize(size_t(D));
  std::iota(c.order.begin(), c.order.end(), 0);
  std::mt19937_64 g(o_.seed * 0x9e3779b97f4a7c15ull + uint64_t(e));
  for (int64_t i = D - 1; o_.shuffle && i > 0; --i)  // Fisher-Yates, with our own index draw (portable)
    std::swap(c.order[size_t(i)], c.order[size_t(g() % uint64_t(i + 1))]);
  c.end.resize(size_t(D));
  int64_t at = 0;
  for (int64_t k = 0; k < D; ++k) {
    const int64_t d = c.order[size_t(k)];
    const int64_t stop = d + 1 < D ? doc_start_[size_t(d) + 1] : store_->size() + virtual_eos_;
    at += stop - doc_start_[size_t(d)];
    c.end[size_t(k)] = at;
  }
  return c;
}

void PackedTokens::check(const uint32_t* ids, int64_t n, int64_t store_pos) const {
  for (int64_t i = 0; i < n; ++i)
    OOMB_CHECK(int64_t(ids[i]) < vocab_, "--data {}: token id {} is beyond the model's vocabulary ({})",
               store_->where(store_pos + i), ids[i], vocab_);
}

void PackedTokens::walk(int64_t p, int64_t n, const std::function<void(int64_t, int64_t)>& run) {
  while (n > 0) {
    const int64_t e = p / length_, q = p % length_;
    int64_t len = std::min(n, length_ - q);
    if (!o_.shuffle) {
      const int64_t from_store = std::min(len, store_->size() - q);
      if (from_store > 0) run(q, from_store);
      if (len > from_store) run(-1, len - from_store);  // the added EOS
    } else {
      const Epoch& ep = epoch(e);
      const int64_t k = std::upper_bound(ep.end.begin(), ep.end.end(), q) - ep.end.begin();
      const int64_t d = ep.order[size_t(k)], doc_begin = k ? ep.end[size_t(k) - 1] : 0;
      const int64_t off = q - doc_begin, doc_len = ep.end[size_t(k)] - doc_begin;
      len = std::min(len, doc_len - off);
      const int64_t from_store = std::min(len, store_->size() - (doc_start_[size_t(d)] + off));
      if (from_store > 0) run(doc_start_[size_t(d)] + off, from_store);
      if (len > std::max<int64_t>(from_store, 0)) run(-1, len - std::max<int64_t>(from_store, 0));  // the virtual EOS
    }
    p += len, n -= len;
  }
}

void PackedTokens::stream(int64_t p, int64_t n, uint32_t* out) {
  walk(p, n, [&](int64_t at, int64_t len) {
    if (at >= 0) {
      store_->get(at, len, out);
      check(out, len, at);
    } else {
      std::fill_n(out, len, uint32_t(o_.eos));
    }
    out += len;
  });
}

void PackedTokens::stream_mask(int64_t p, int64_t n, uint8_t* out) {
  if (!mask_) return void(std::fill_n(out, n, uint8_t(1)));
  walk(p, n, [&](int64_t at, int64_t len) {
    if (at >= 0) mask_->get(at, len, out);
    else std::fill_n(out, len, uint8_t(1));  // an added EOS is trained, as the EOS after a completion
    out += len;
  });
}

int64_t PackedTokens::start_of(int64_t w, int64_t N, int64_t t0, int64_t n) const {
  int64_t p = 0;  // w*N + t0 + n + 1 must not wrap
  OOMB_CHECK(!__builtin_mul_overflow(w, N, &p) && !__builtin_add_overflow(p, t0, &p) &&
                 !__builtin_add_overflow(p, n + 1, &p),
             "--data {}: window {} of {} tokens lies beyond 2^63 tokens of the stream", store_->describe(), w, N);
  return w * N + t0;
}

int64_t PackedTokens::targets_in(int64_t w, int64_t N, int32_t sep) {
  if (sep >= 0 || o_.whole) return TokenSource::targets_in(w, N, sep);
  if (!mask_) return N;
  const int64_t block = std::min<int64_t>(N, 1 << 16);
  mask_buf_.resize(size_t(block));
  int64_t count = 0;
  for (int64_t t0 = 0; t0 < N; t0 += block) {
    const int64_t n = std::min(block, N - t0);
    stream_mask(start_of(w, N, t0, n) + 1, n, mask_buf_.data());
    count += std::count(mask_buf_.begin(), mask_buf_.begin() + n, uint8_t(1));
  }
  return count;
}

void PackedTokens::read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) {
  if (o_.whole) return read_whole(w, N, t0, n, ids, targets);
  buf_.resize(size_t(n + 1));
  stream(start_of(w, N, t0, n), n + 1, buf_.data());
  if (mask_) {
    mask_buf_.resize(size_t(n + 1));
    stream_mask(w * N + t0, n + 1, mask_buf_.data());
  }
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = int32_t(buf_[size_t(i)]);
    targets[i] = !mask_ || mask_buf_[size_t(i) + 1] ? int32_t(buf_[size_t(i) + 1]) : -1;
  }
}

}  // namespace oomb
