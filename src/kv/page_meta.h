// Sparse attention's page metadata (--sparse-pages): the mean key (after RoPE) of every K/V page
// per kv head, (pages, G, D) bf16 per layer, written with the pages (KVCache::write). It stays in
// the backend's memory when the pages themselves are offloaded: it is all that selection reads,
// 2 x G x D bytes a page per layer (Qwen2.5-7B: 224 bytes a token). Tag page_meta.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "kv/paged_kv.h"

namespace oomb {

class PageMeta {
 public:
  PageMeta(const KVShape& s, Backend& be) : s_(s), be_(be) {}
  // Room for sequences of N tokens (allocated once; a longer sequence frees the old buffer first).
  void reserve(int64_t N);
  // Layer l's means updated with the chunk's keys k (T, G, D) f32 of tokens [t0, t0 + T).
  void write(int64_t l, int64_t t0, const Tensor& k);
  // Layer l's means of pages [0, pages): (pages, G, D) bf16.
  Tensor means(int64_t l, int64_t pages) const;
  // Bytes for sequences of N tokens (layers x pages x G x D x 2).
  static int64_t bytes(const KVShape& s, int64_t N);

 private:
  KVShape s_;
  Backend& be_;
  int64_t pages_ = 0;  // per layer
  Buffer buf_;
};

}  // namespace oomb
