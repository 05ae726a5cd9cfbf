// Tensor views: pointer + dtype + shape + tier. A view never owns memory (buffers do).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"

namespace oomb {

constexpr int kMaxDims = 4;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::array<int64_t, kMaxDims> shape{};
  int ndim = 0;
  Tier tier = Tier::Host;

  Tensor() = default;
  Tensor(void* p, DType dt, std::initializer_list<int64_t> dims, Tier t = Tier::Host) : data(p), dtype(dt), tier(t) {
    OOMB_CHECK(dims.size() <= kMaxDims, "tensor: at most {} dims", kMaxDims);
    for (int64_t d : dims) shape[ndim++] = d;
  }
  static Tensor f32(float* p, std::initializer_list<int64_t> dims) { return Tensor(p, DType::F32, dims); }
  static Tensor i32(int32_t* p, std::initializer_list<int64_t> dims) { return Tensor(p, DType::I32, dims); }

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t row_elems() const { return ndim == 0 ? 1 : numel() / shape[0]; }

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  float* f() const { return static_cast<float*>(data); }

  // rows [begin, begin+n) along dim 0
  Tensor rows(int64_t begin, int64_t n) const {
    Tensor t = *this;
    t.shape[0] = n;
    t.data = static_cast<char*>(data) + size_t(begin * row_elems()) * dtype_size(dtype);
    return t;
  }
  // same memory, new shape with equal element count
  Tensor reshaped(std::initializer_list<int64_t> dims) const {
    Tensor t(data, dtype, dims, tier);
    OOMB_CHECK(t.numel() == numel(), "tensor: cannot reshape {} to {}", shape_str(), t.shape_str());
    return t;
  }
  std::string shape_str() const {
    std::string s = "(";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + ")";
  }
};

// Carves tensors out of one buffer: a static plan, so the hot loop never allocates.
class Arena {
 public:
  Arena() = default;
  Arena(Tier tier, Tag tag, size_t bytes) : buf_(tier, tag, bytes) {}
  Tensor take(DType dt, std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, dt, dims, buf_.tier());
    size_t need = (t.bytes() + 63) / 64 * 64;
    OOMB_CHECK(used_ + need <= buf_.bytes(), "arena ({}): plan exceeded: need {} more bytes, {} of {} used",
               tag_name(buf_.tag()), need, used_, buf_.bytes());
    t.data = static_cast<char*>(buf_.data()) + used_;
    used_ += need;
    return t;
  }
  // Bytes a tensor of these dims takes in an arena (64-byte aligned); throws on negative dims or overflow.
  static size_t need(DType dt, std::initializer_list<int64_t> dims) {
    size_t n = dtype_size(dt);
    for (int64_t d : dims) {
      OOMB_CHECK(d >= 0, "arena: negative dimension {}", d);
      OOMB_CHECK(!__builtin_mul_overflow(n, size_t(d), &n) && n <= (size_t(1) << 62),
                 "arena: a tensor of these dimensions does not fit in memory");
    }
    return (n + 63) / 64 * 64;
  }

 private:
  Buffer buf_;
  size_t used_ = 0;
};

}  // namespace oomb
