#include "kv/page_pool.h"

#include "core/error.h"

namespace oomb {

PagePool::PagePool(Tier tier, Tag tag, size_t page_bytes) : tier_(tier), tag_(tag), page_bytes_(page_bytes) {
  OOMB_CHECK(page_bytes > 0, "page pool ({}): page size must be positive", tag_name(tag));
}

int32_t PagePool::acquire() {
  ++in_use_;
  if (!free_.empty()) {
    const int32_t p = free_.back();
    free_.pop_back();
    return p;
  }
  OOMB_CHECK(pages_.size() < size_t(INT32_MAX), "page pool ({}): too many pages", tag_name(tag_));
  pages_.emplace_back(tier_, tag_, page_bytes_);
  return int32_t(pages_.size() - 1);
}

void PagePool::release(int32_t page) {
  OOMB_CHECK(page >= 0 && size_t(page) < pages_.size(), "page pool ({}): release of unknown page {}",
             tag_name(tag_), page);
  free_.push_back(page);
  --in_use_;
}

}  // namespace oomb
