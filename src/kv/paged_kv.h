// K/V (or dK/dV) of every layer in fixed-size pages: page p of a layer holds tokens
// [p*P, p*P + P), K then V, each (P, G, D) in the store's dtype (f32 or bf16: --kv-dtype for K/V,
// --kv-grad-dtype for gradients). A page table per layer maps page index -> pool page.
// K is stored after RoPE, at absolute positions.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "kv/page_pool.h"

namespace oomb {

struct KVShape {
  int64_t layers = 0, kv_heads = 0, head_dim = 0, page_size = 128;
  DType dtype = DType::F32;  // f32, or bf16 when asked
  int64_t page_elems() const { return 2 * page_size * kv_heads * head_dim; }  // K and V
  int64_t page_bytes() const { return page_elems() * int64_t(dtype_size(dtype)); }
  int64_t pages_for(int64_t tokens) const { return (tokens + page_size - 1) / page_size; }
  size_t row_bytes() const { return size_t(kv_heads * head_dim) * dtype_size(dtype); }  // one token's K (or V)
};

// Walks tokens [t0, t0 + n) page by page (pages of P tokens): fn(page, row in page, row in the range, rows).
template <typename Fn>
void for_page_rows(int64_t P, int64_t t0, int64_t n, Fn fn) {
  for (int64_t i = 0; i < n;) {
    const int64_t t = t0 + i, p = t / P, r = t % P, len = std::min(P - r, n - i);
    fn(p, r, i, len);
    i += len;
  }
}

class PagedKV {
 public:
  // Pages live in `tier` (the backend's memory, or pinned host memory when offloaded); zeroing,
  // writes and adds go through the backend's ops (pages in the backend's memory only).
  PagedKV(const KVShape& s, Backend& be, Tag tag, Tier tier);
  const KVShape& shape() const { return s_; }
  Tier tier() const { return pool_.tier(); }
  void reserve(int64_t pages) { pool_.reserve(pages); }  // pages of all layers together

  bool has(int64_t layer, int64_t page) const;
  // Acquires page (layer, page) if absent, zero-filled when `zero` (through the backend: pages in
  // its memory). Returns whether it was absent.
  bool ensure(int64_t layer, int64_t page, bool zero = true);
  void release(int64_t layer, int64_t page);  // no-op when absent
  void release_from(int64_t layer, int64_t first_page);  // every page >= first_page
  void clear();                                           // every page of every layer

  // Views of rows [r0, r0 + n) of page (layer, page): (n, G, D). The page must exist.
  Tensor k(int64_t layer, int64_t page, int64_t r0, int64_t n) const;
  Tensor v(int64_t layer, int64_t page, int64_t r0, int64_t n) const;
  // Copies rows: tokens [t0, t0 + n) of f32 `src` (n, G, D) into K or V pages (converted to the
  // store's dtype; pages must exist), or the pages' rows (f32 or bf16) into f32 dst (n, G, D),
  // zero where a page does not exist. Pages in the backend's memory; one cast_to_pieces (or
  // cast_from_pieces) each for K and V.
  void write(int64_t layer, int64_t t0, const Tensor& k_src, const Tensor& v_src);
  void read_into(int64_t layer, int64_t t0, Tensor& k_dst, Tensor& v_dst);

  int64_t pages_in_use() const { return pool_.in_use(); }
  int64_t pages_reserved() const { return pool_.reserved(); }

 private:
  char* page_ptr(int64_t layer, int64_t page) const;
  void pieces(int64_t layer, int64_t t0, int64_t n, bool absent_ok, std::vector<Backend::RowPiece>& k_pieces,
              std::vector<Backend::RowPiece>& v_pieces) const;
  Tensor rows(int64_t layer, int64_t page, int64_t first_row, int64_t n) const;
  KVShape s_;
  Backend& be_;
  PagePool pool_;
  std::vector<std::vector<int32_t>> table_;  // [layer][page] -> pool id or -1
};

}  // namespace oomb
