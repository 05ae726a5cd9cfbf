// A pool of equal-size pages carved out of slabs: reserve(n) adds one tagged slab for the pages
// missing, and released pages are recycled through a free list. A step reserves what its plan
// says it needs at its start, so the accountant shows exactly the planned pages and a step
// allocates nothing per page (acquire without a free page adds a slab of one page).
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"

namespace oomb {

class PagePool {
 public:
  PagePool(Tier tier, Tag tag, size_t page_bytes);
  void reserve(int64_t pages);  // at least this many pages in all
  int32_t acquire();            // a page id; contents unspecified
  void release(int32_t page);
  void* data(int32_t page) const { return ptrs_[size_t(page)]; }
  size_t page_bytes() const { return page_bytes_; }
  Tier tier() const { return tier_; }
  int64_t in_use() const { return in_use_; }
  int64_t reserved() const { return int64_t(ptrs_.size()); }

 private:
  Tier tier_;
  Tag tag_;
  size_t page_bytes_;
  std::vector<Buffer> slabs_;
  std::vector<void*> ptrs_;    // page id -> its memory
  std::vector<int32_t> free_;  // ids, the lowest last so that pages are handed out in order
  int64_t in_use_ = 0;
};

}  // namespace oomb
