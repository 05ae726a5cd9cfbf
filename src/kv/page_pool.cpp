#include "kv/page_pool.h"

#include "core/error.h"

namespace oomb {

PagePool::PagePool(Tier tier, Tag tag, size_t page_bytes) : tier_(tier), tag_(tag), page_bytes_(page_bytes) {
  OOMB_CHECK(page_bytes > 0, "page pool ({}): page size must be positive", tag_name(tag));
}

void PagePool::reserve(int64_t pages) {
  const int64_t have = reserved();
  if (pages <= have) return;
  OOMB_CHECK(pages < int64_t(INT32_MAX), "page pool ({}): {} pages is too many", tag_name(tag_), pages);
  size_t bytes = 0;
  OOMB_CHECK(!__builtin_mul_overflow(size_t(pages - have), page_bytes_, &bytes),
             "page pool ({}): {} pages of {} B overflow", tag_name(tag_), pages - have, page_bytes_);
  Buffer& slab = slabs_.emplace_back(tier_, tag_, bytes);
  std::vector<int32_t> fresh;
  for (int64_t i = 0; i < pages - have; ++i) {
    ptrs_.push_back(slab.as<char>() + size_t(i) * page_bytes_);
    fresh.push_back(int32_t(have + i));
  }
  free_.insert(free_.begin(), fresh.rbegin(), fresh.rend());  // older free pages are taken first
}

int32_t PagePool::acquire() {
  if (free_.empty()) reserve(reserved() + 1);
  ++in_use_;
  const int32_t p = free_.back();
  free_.pop_back();
  return p;
}

void PagePool::release(int32_t page) {
  OOMB_CHECK(page >= 0 && size_t(page) < ptrs_.size(), "page pool ({}): release of unknown page {}",
             tag_name(tag_), page);
  free_.push_back(page);
  --in_use_;
}

}  // namespace oomb
