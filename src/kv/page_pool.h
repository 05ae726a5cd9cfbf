// A pool of equal-size pages. Memory is reserved page by page up to the pool's high-water mark
// (each reservation a tagged Buffer) and released pages are recycled through a free list, so the
// accountant shows exactly the peak number of pages and a steady-state step allocates nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"

namespace oomb {

class PagePool {
 public:
  PagePool(Tier tier, Tag tag, size_t page_bytes);
  int32_t acquire();  // a page id; contents unspecified
  void release(int32_t page);
  void* data(int32_t page) const { return pages_[size_t(page)].data(); }
  size_t page_bytes() const { return page_bytes_; }
  int64_t in_use() const { return in_use_; }
  int64_t reserved() const { return int64_t(pages_.size()); }

 private:
  Tier tier_;
  Tag tag_;
  size_t page_bytes_;
  std::vector<Buffer> pages_;
  std::vector<int32_t> free_;
  int64_t in_use_ = 0;
};

}  // namespace oomb
