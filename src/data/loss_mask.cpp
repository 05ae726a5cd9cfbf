#include "data/loss_mask.h"

#include <bit>
#include <cstring>
#include <fmt/format.h>

#include "core/fnv.h"
#include "data/token_store.h"

namespace oomb {

void LossMaskBuilder::append(int64_t n, bool trained) {
  if (n <= 0) return;
  words_.resize(size_t((n_ + n + 63) / 64), 0);
  if (trained)
    for (int64_t i = n_; i < n_ + n; ++i) words_[size_t(i >> 6)] |= uint64_t(1) << (i & 63);
  n_ += n;
}

LossMask::LossMask(const LossMaskBuilder& b)
    : words_(Tier::Host, Tag::Data, std::max<size_t>(b.words().size(), 1) * 8), n_(b.size()) {
  if (!b.words().empty()) std::memcpy(words_.data(), b.words().data(), b.words().size() * 8);
  for (uint64_t w : b.words()) trained_ += std::popcount(w);
}

void LossMask::get(int64_t begin, int64_t n, uint8_t* out) const {
  const uint64_t* w = words_.as<uint64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = begin + i;
    out[i] = uint8_t((w[size_t(j >> 6)] >> (j & 63)) & 1);
  }
}

std::string LossMask::fingerprint() const {
  Fnv f;
  f.mix(uint64_t(n_));
  const uint64_t* w = words_.as<uint64_t>();
  for (int64_t i = 0; i < (n_ + 63) / 64; ++i) f.mix(w[size_t(i)]);
  return f.hex();
}

std::string data_fingerprint(const TokenStore& ids, const LossMask* mask) {
  const std::string t = token_fingerprint(ids);
  if (!mask) return t;  // (as before masks: older checkpoints resume)
  Fnv f;
  f.mix(t);
  f.mix(mask->fingerprint());
  return f.hex();
}

}  // namespace oomb
