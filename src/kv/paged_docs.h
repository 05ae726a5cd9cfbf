// Per-token document ids of a packed sequence, in pages of P tokens beside the K/V pages (for
// --doc-mask): attention over earlier pages needs the document of every key. The pages live in the
// backend's memory (tag data); on a device, a mirror in pinned host memory lets the backward sweep
// read them back without waiting for the device, and the pages go up from it without staging.
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
  void reserve(int64_t pages);
  int64_t page_size() const { return P_; }
  // Bytes for N tokens in the backend's memory, and in pinned host memory (the mirror, on a device).
  static int64_t bytes(int64_t N, int64_t P) { return (N + P - 1) / P * P * 4; }
  bool mirrored() const { return be_.tier() != Tier::Host; }

 private:
  int32_t* ensure(int64_t p);
  int32_t* host_page(int64_t p) const;
  int64_t P_;
  Backend& be_;
  PagePool pool_, mirror_;
  std::vector<int32_t> table_;  // page index -> pool id (the same id in the mirror) or -1
};

}  // namespace oomb
