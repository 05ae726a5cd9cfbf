#include "kv/paged_docs.h"

#include "core/error.h"

namespace oomb {

PagedDocs::PagedDocs(int64_t page_size, Tier tier) : P_(page_size), pool_(tier, Tag::Data, size_t(page_size) * 4) {}

int32_t* PagedDocs::page(int64_t p) {
  if (p >= int64_t(table_.size())) table_.resize(size_t(p + 1), -1);
  if (table_[size_t(p)] < 0) table_[size_t(p)] = pool_.acquire();
  return static_cast<int32_t*>(pool_.data(table_[size_t(p)]));
}

const int32_t* PagedDocs::page(int64_t p) const {
  OOMB_CHECK(p < int64_t(table_.size()) && table_[size_t(p)] >= 0, "paged docs: page {} does not exist", p);
  return static_cast<const int32_t*>(pool_.data(table_[size_t(p)]));
}

void PagedDocs::release_from(int64_t first) {
  for (int64_t p = first; p < int64_t(table_.size()); ++p)
    if (table_[size_t(p)] >= 0) pool_.release(table_[size_t(p)]), table_[size_t(p)] = -1;
}

}  // namespace oomb
