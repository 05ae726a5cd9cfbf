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


// the rows [t0, t0 + n) of layer l's pages as pieces of their K and V halves, in order; a page
// that does not exist: an error, or where absent_ok a piece with no data
void PagedKV::pieces(int64_t l, int64_t t0, int64_t n, bool absent_ok, std::vector<Backend::RowPiece>& kp,
                     std::vector<Backend::RowPiece>& vp) const {
  OOMB_CHECK(be_.computes_on(pool_.tier()), "paged kv: pages in {} memory; the {} backend casts into its own ({})",
             tier_name(pool_.tier()), be_.name(), tier_name(be_.tier()));
  kp.clear(), vp.clear();
  for_page_rows(s_.page_size, t0, n, [&](int64_t p, int64_t r, int64_t, int64_t len) {
    const bool held = !absent_ok || has(l, p);  // (k() names a page that does not exist)
    kp.push_back({held ? k(l, p, r, len).data : nullptr, len});
    vp.push_back({held ? v(l, p, r, len).data : nullptr, len});
  });
}

void PagedKV::write(int64_t l, int64_t t0, const Tensor& ks, const Tensor& vs) {
  std::vector<Backend::RowPiece> kp, vp;
  pieces(l, t0, ks.dim(0), false, kp, vp);
  be_.cast_to_pieces(ks, kp, s_.dtype);
  be_.cast_to_pieces(vs, vp, s_.dtype);
}

void PagedKV::read_into(int64_t l, int64_t t0, Tensor& kd, Tensor& vd) {
  std::vector<Backend::RowPiece> kp, vp;  // a page nothing was accumulated into gives zeros
  pieces(l, t0, kd.dim(0), true, kp, vp);
  be_.cast_from_pieces(kp, s_.dtype, kd);
  be_.cast_from_pieces(vp, s_.dtype, vd);
}

}  // namespace oomb
