#include "kv/page_meta.h"

namespace oomb {

int64_t PageMeta::bytes(const KVShape& s, int64_t N) {
  return s.layers * s.pages_for(N) * s.kv_heads * s.head_dim * 2;
}

void PageMeta::reserve(int64_t N) {
  const int64_t pages = s_.pages_for(N);
  if (pages <= pages_) return;
  buf_.reset();  // the old buffer goes first: the peak is the new one alone
  buf_ = Buffer(be_.tier(), Tag::PageMeta, size_t(bytes(s_, N)));
  pages_ = pages;
}

Tensor PageMeta::means(int64_t l, int64_t pages) const {
  OOMB_CHECK(pages <= pages_ && l < s_.layers, "page metadata: {} pages of layer {} asked, {} reserved", pages, l,
             pages_);
  char* base = buf_.as<char>() + size_t(l * pages_ * s_.kv_heads * s_.head_dim * 2);
  return Tensor(base, DType::BF16, {pages, s_.kv_heads, s_.head_dim}, be_.tier());
}

void PageMeta::write(int64_t l, int64_t t0, const Tensor& k) {
  if (k.dim(0) == 0) return;
  Tensor m = means(l, pages_);
  be_.page_key_means(k, t0, s_.page_size, m);
}

}  // namespace oomb
