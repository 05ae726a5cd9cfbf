// Per-token document ids of a packed sequence, in pages of P tokens beside the K/V pages (for
// --doc-mask): attention over earlier pages needs the document of every key. Tag data.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/page_pool.h"

namespace oomb {

class PagedDocs {
 public:
  PagedDocs(int64_t page_size, Tier tier);
  int32_t* page(int64_t p);  // created on first use
  const int32_t* page(int64_t p) const;
  void release_from(int64_t first_page);
  void clear() { release_from(0); }
  int64_t page_size() const { return P_; }

 private:
  int64_t P_;
  PagePool pool_;
  std::vector<int32_t> table_;  // page index -> pool id or -1
};

}  // namespace oomb
