#include "kv/paged_docs.h"

#include <algorithm>

#include "core/error.h"

namespace oomb {

PagedDocs::PagedDocs(int64_t page_size, Backend& be)
    : P_(page_size), be_(be), pool_(be.tier(), Tag::Data, size_t(page_size) * 4) {}

int32_t* PagedDocs::ensure(int64_t p) {
  if (p >= int64_t(table_.size())) table_.resize(size_t(p + 1), -1);
  if (table_[size_t(p)] < 0) table_[size_t(p)] = pool_.acquire();
  return static_cast<int32_t*>(pool_.data(table_[size_t(p)]));
}

const int32_t* PagedDocs::page(int64_t p) const {
  OOMB_CHECK(p < int64_t(table_.size()) && table_[size_t(p)] >= 0, "paged docs: page {} does not exist", p);
  return static_cast<const int32_t*>(pool_.data(table_[size_t(p)]));
}

void PagedDocs::write(int64_t t0, const int32_t* host, int64_t n) {
  for (int64_t i = 0; i < n;) {
    const int64_t t = t0 + i, len = std::min(P_ - t % P_, n - i);
    be_.copy(ensure(t / P_) + t % P_, be_.tier(), host + i, Tier::Host, size_t(len) * 4);
    i += len;
  }
}

void PagedDocs::read(int64_t t0, int32_t* host, int64_t n) {
  for (int64_t i = 0; i < n;) {
    const int64_t t = t0 + i, len = std::min(P_ - t % P_, n - i);
    be_.copy(host + i, Tier::Host, page(t / P_) + t % P_, be_.tier(), size_t(len) * 4);
    i += len;
  }
}

void PagedDocs::release_from(int64_t first) {
  for (int64_t p = first; p < int64_t(table_.size()); ++p)
    if (table_[size_t(p)] >= 0) pool_.release(table_[size_t(p)]), table_[size_t(p)] = -1;
}

}  // namespace oomb
