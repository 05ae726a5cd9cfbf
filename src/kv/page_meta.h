// Sparse attention's page metadata (--sparse-pages), per layer, written with the pages
// (KVCache::write), kept in the backend's memory even when the pages themselves are offloaded:
// it is all that selection reads. Tag page_meta. Two kinds (--sparse-score):
//   mean:  the mean key (after RoPE) of every page per kv head, (pages, G, D) bf16: 2 x G x D
//          bytes a page per layer (Qwen2.5-7B: 224 bytes a token);
//   quest: the per-dimension min and max keys (Quest, arXiv 2406.10774), (pages, 2, G, D) bf16,
//          min rounded down and max up, so they bound the keys: twice the mean's bytes.
#pragma once
#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "kv/paged_kv.h"

namespace oomb {

enum class PageScore : uint8_t { Mean, Quest };
// "mean" / "quest"; an unknown name is an error naming --sparse-score.
PageScore page_score_parse(const std::string& name);
const char* page_score_name(PageScore s);

class PageMeta {
 public:
  PageMeta(const KVShape& s, Backend& be, PageScore kind = PageScore::Mean) : s_(s), be_(be), kind_(kind) {}
  PageScore kind() const { return kind_; }
  // Room for sequences of N tokens (allocated once; a longer sequence frees the old buffer first).
  void reserve(int64_t N);
  // Layer l's metadata updated with the chunk's keys k (T, G, D) f32 of tokens [t0, t0 + T).
  void write(int64_t l, int64_t t0, const Tensor& k);
  // Layer l's metadata of pages [0, pages): (pages, G, D) bf16 means, or (pages, 2, G, D) bf16 min/max.
  Tensor meta(int64_t l, int64_t pages) const;
  // Bytes for sequences of N tokens (layers x pages x G x D x 2, twice that for quest).
  static int64_t bytes(const KVShape& s, int64_t N, PageScore kind);

 private:
  int64_t page_elems() const { return (kind_ == PageScore::Quest ? 2 : 1) * s_.kv_heads * s_.head_dim; }

  KVShape s_;
  Backend& be_;
  PageScore kind_;
  int64_t pages_ = 0;  // per layer
  Buffer buf_;
};

}  // namespace oomb
