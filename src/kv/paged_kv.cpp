#include "kv/paged_kv.h"

#include <algorithm>
#include <cstring>

namespace oomb {

PagedKV::PagedKV(const KVShape& s, Backend& be, Tag tag, Tier tier)
    : s_(s), be_(be), pool_(tier, tag, size_t(s.page_bytes())), table_(size_t(s.layers)) {
  OOMB_CHECK(s.page_size > 0, "--page-size: must be positive, got {}", s.page_size);
  OOMB_CHECK(s.dtype == DType::F32 || s.dtype == DType::BF16, "paged kv: dtype {} is not f32 or bf16",
             dtype_name(s.dtype));
}

bool PagedKV::has(int64_t l, int64_t p) const {
  const auto& t = table_[size_t(l)];
  return p < int64_t(t.size()) && t[size_t(p)] >= 0;
}

bool PagedKV::ensure(int64_t l, int64_t p, bool zero) {
  auto& t = table_[size_t(l)];
  if (p >= int64_t(t.size())) t.resize(size_t(p + 1), -1);
  if (t[size_t(p)] >= 0) return false;
  const int32_t id = pool_.acquire();
  if (zero) be_.fill_zero(pool_.data(id), pool_.page_bytes());
  t[size_t(p)] = id;
  return true;
}

void PagedKV::release(int64_t l, int64_t p) {
  auto& t = table_[size_t(l)];
  if (p >= int64_t(t.size()) || t[size_t(p)] < 0) return;
  pool_.release(t[size_t(p)]);
  t[size_t(p)] = -1;
}

void PagedKV::release_from(int64_t l, int64_t first) {
  for (int64_t p = first; p < int64_t(table_[size_t(l)].size()); ++p) release(l, p);
}

void PagedKV::clear() {
  for (int64_t l = 0; l < s_.layers; ++l) release_from(l, 0);
}

char* PagedKV::page_ptr(int64_t l, int64_t p) const {
  OOMB_CHECK(has(l, p), "paged kv: page {} of layer {} does not exist", p, l);
  return static_cast<char*>(pool_.data(table_[size_t(l)][size_t(p)]));
}

// rows [r, r + n) of the page's K (r counted from 0) or V (r counted from page_size)
Tensor PagedKV::rows(int64_t l, int64_t p, int64_t r, int64_t n) const {
  return Tensor(page_ptr(l, p) + size_t(r) * s_.row_bytes(), s_.dtype, {n, s_.kv_heads, s_.head_dim}, pool_.tier());
}

Tensor PagedKV::k(int64_t l, int64_t p, int64_t r0, int64_t n) const { return rows(l, p, r0, n); }
Tensor PagedKV::v(int64_t l, int64_t p, int64_t r0, int64_t n) const { return rows(l, p, s_.page_size + r0, n); }


void PagedKV::write(int64_t l, int64_t t0, const Tensor& ks, const Tensor& vs) {
  for_page_rows(s_.page_size, t0, ks.dim(0), [&](int64_t p, int64_t r, int64_t i, int64_t len) {
    Tensor kd = k(l, p, r, len), vd = v(l, p, r, len);
    be_.cast(ks.rows(i, len), kd);
    be_.cast(vs.rows(i, len), vd);
  });
}

void PagedKV::read_into(int64_t l, int64_t t0, Tensor& kd, Tensor& vd) {
  for_page_rows(s_.page_size, t0, kd.dim(0), [&](int64_t p, int64_t r, int64_t i, int64_t len) {
    Tensor kr = kd.rows(i, len), vr = vd.rows(i, len);
    if (!has(l, p)) {  // nothing was accumulated into this page
      be_.zero(kr);
      be_.zero(vr);
      return;
    }
    be_.cast(k(l, p, r, len), kr);
    be_.cast(v(l, p, r, len), vr);
  });
}

}  // namespace oomb
