// Per-token document ids of a packed sequence, in pages of P tokens beside the K/V pages (for
// --doc-mask): attention over earlier pages needs the document of every key. The pages live in the
// backend's memory (tag data); the host writes and reads them through the backend.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "kv/page_pool.h"

namespace oomb {

class PagedDocs {
 public:
  PagedDocs(int64_t page_size, Backend& be);
  // ids of tokens [t0, t0 + n) from / to host memory; writing creates pages as needed
  void write(int64_t t0, const int32_t* host, int64_t n);
  void read(int64_t t0, int32_t* host, int64_t n);
  const int32_t* page(int64_t p) const;  // backend memory, for attention's key documents
  void release_from(int64_t first_page);
  void clear() { release_from(0); }
  int64_t page_size() const { return P_; }

 private:
  int32_t* ensure(int64_t p);
  int64_t P_;
  Backend& be_;
  PagePool pool_;
  std::vector<int32_t> table_;  // page index -> pool id or -1
};

}  // namespace oomb
