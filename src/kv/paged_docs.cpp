#include "kv/paged_docs.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kv/paged_kv.h"

namespace oomb {

PagedDocs::PagedDocs(int64_t page_size, Backend& be)
    : P_(page_size),
      be_(be),
      pool_(be.tier(), Tag::Data, size_t(page_size) * 4),
      mirror_(be.tier() != Tier::Host ? Tier::Pinned : Tier::Host, Tag::Data, size_t(page_size) * 4) {}

void PagedDocs::reserve(int64_t pages) {
  pool_.reserve(pages);
  if (mirrored()) mirror_.reserve(pages);
}

int32_t* PagedDocs::ensure(int64_t p) {
  if (p >= int64_t(table_.size())) table_.resize(size_t(p + 1), -1);
  if (table_[size_t(p)] < 0) {
    table_[size_t(p)] = pool_.acquire();
    if (mirrored()) OOMB_CHECK(mirror_.acquire() == table_[size_t(p)], "paged docs: the mirror lost step");
  }
  return static_cast<int32_t*>(pool_.data(table_[size_t(p)]));
}

const int32_t* PagedDocs::page(int64_t p) const {
  OOMB_CHECK(p < int64_t(table_.size()) && table_[size_t(p)] >= 0, "paged docs: page {} does not exist", p);
  return static_cast<const int32_t*>(pool_.data(table_[size_t(p)]));
}

int32_t* PagedDocs::host_page(int64_t p) const {
  page(p);  // exists
  return static_cast<int32_t*>(mirrored() ? mirror_.data(table_[size_t(p)]) : pool_.data(table_[size_t(p)]));
}

void PagedDocs::write(int64_t t0, const int32_t* host, int64_t n) {
  for_page_rows(P_, t0, n, [&](int64_t p, int64_t r, int64_t i, int64_t len) {
    int32_t* dev = ensure(p) + r;
    if (mirrored()) {
      int32_t* mir = host_page(p) + r;
      std::memcpy(mir, host + i, size_t(len) * 4);
      be_.copy_async(dev, be_.tier(), mir, Tier::Pinned, size_t(len) * 4, Stream::Compute);  // (no staging wait)
    } else {
      std::memcpy(dev, host + i, size_t(len) * 4);
    }
  });
}

void PagedDocs::read(int64_t t0, int32_t* host, int64_t n) {
  for_page_rows(P_, t0, n, [&](int64_t p, int64_t r, int64_t i, int64_t len) {
    std::memcpy(host + i, host_page(p) + r, size_t(len) * 4);
  });
}

void PagedDocs::release_from(int64_t first) {
  for (int64_t p = first; p < int64_t(table_.size()); ++p)
    if (table_[size_t(p)] >= 0) {
      pool_.release(table_[size_t(p)]);
      if (mirrored()) mirror_.release(table_[size_t(p)]);
      table_[size_t(p)] = -1;
    }
}

}  // namespace oomb
