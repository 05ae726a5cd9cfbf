// A device buffer (tag workspace) grown to the largest size asked for: steady-state steps allocate
// nothing, and the peak is the largest buffer alone (the old one goes first).
#pragma once
#include <cstddef>

#include "core/memory.h"

namespace oomb::cuda {

struct Scratch {
  Buffer buf;
  void* get(size_t bytes) {
    if (buf.bytes() < bytes) {
      buf.reset();
      buf = Buffer(Tier::Device, Tag::Workspace, bytes);
    }
    return buf.data();
  }
  template <typename T>
  T* get(size_t n) {
    return static_cast<T*>(get(n * sizeof(T)));
  }
};

}  // namespace oomb::cuda
