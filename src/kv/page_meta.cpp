#include "kv/page_meta.h"

namespace oomb {

PageScore page_score_parse(const std::string& name) {
  if (name == "mean") return PageScore::Mean;
  if (name == "quest") return PageScore::Quest;
  fail("--sparse-score: '{}' is not a known score (known: mean, quest)", name);
}

const char* page_score_name(PageScore s) { return s == PageScore::Quest ? "quest" : "mean"; }

int64_t PageMeta::bytes(const KVShape& s, int64_t N, PageScore kind) {
  return s.layers * s.pages_for(N) * (kind == PageScore::Quest ? 2 : 1) * s.kv_heads * s.head_dim * 2;
}

void PageMeta::reserve(int64_t N) {
  const int64_t pages = s_.pages_for(N);
  if (pages <= pages_) return;
  buf_.reset();  // the old buffer goes first: the peak is the new one alone
  buf_ = Buffer(be_.tier(), Tag::PageMeta, size_t(bytes(s_, N, kind_)));
  pages_ = pages;
}

Tensor PageMeta::meta(int64_t l, int64_t pages) const {
  OOMB_CHECK(pages <= pages_ && l < s_.layers, "page metadata: {} pages of layer {} asked, {} reserved", pages, l,
             pages_);
  char* base = buf_.as<char>() + size_t(l * pages_ * page_elems() * 2);
  if (kind_ == PageScore::Quest)
    return Tensor(base, DType::BF16, {pages, 2, s_.kv_heads, s_.head_dim}, be_.tier());
  return Tensor(base, DType::BF16, {pages, s_.kv_heads, s_.head_dim}, be_.tier());
}

void PageMeta::write(int64_t l, int64_t t0, const Tensor& k) {
  if (k.dim(0) == 0) return;
  Tensor m = meta(l, pages_);
  if (kind_ == PageScore::Quest)
    be_.page_key_minmax(k, t0, s_.page_size, m);
  else
    be_.page_key_means(k, t0, s_.page_size, m);
}

}  // namespace oomb
