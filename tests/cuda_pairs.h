// The CUDA op tests' shared pieces (test_cuda_ops, test_cuda_attention): the CPU backend and the
// CUDA backend (with attention pinned to oomb's tensor-core kernels, and to cuDNN), a tensor on
// both sides with its device copy between sentinel bytes that every op must leave alone, and the
// relative error of the device's values against the CPU's.
#pragma once
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_backend_with.h"
#include "test_util.h"

namespace oomb::testing {

inline constexpr size_t kGuard = 256;  // sentinel bytes on each side of a device tensor
inline constexpr unsigned char kSentinel = 0xA5;

struct Backends {
  std::unique_ptr<Backend> cpu = make_cpu_backend(), cuda;
  // attention pinned to oomb's tensor-core kernels, and to cuDNN (an error where it cannot take a call)
  std::unique_ptr<Backend> mma, cudnn;
  std::string why;
  Backends() {
    cuda = make_cuda_backend(&why);
    if (cuda) mma = cuda_backend_with_attention("mma"), cudnn = cuda_backend_with_attention("cudnn");
  }
};
inline Backends& backends() {
  static Backends b;
  return b;
}

// A tensor on both sides: host values (the CPU run works on them) and a guarded device copy.
struct Pair {
  std::vector<char> host;
  Buffer dev;
  Tensor h, d;
  Pair(DType dt, std::initializer_list<int64_t> dims) {
    h = Tensor(nullptr, dt, dims, Tier::Host);
    host.assign(h.bytes() + 1, 0);
    h.data = host.data();
    dev = Buffer(Tier::Device, Tag::Workspace, h.bytes() + 2 * kGuard);
    d = h;
    d.data = static_cast<char*>(dev.data()) + kGuard;
    d.tier = Tier::Device;
    std::vector<unsigned char> fill(h.bytes() + 2 * kGuard, kSentinel);
    backends().cuda->copy(dev.data(), Tier::Device, fill.data(), Tier::Host, fill.size());
  }
  void upload() { backends().cuda->copy(d.data, Tier::Device, h.data, Tier::Host, h.bytes()); }
  std::vector<char> download() const {
    std::vector<char> all(h.bytes() + 2 * kGuard);
    backends().cuda->copy(all.data(), Tier::Host, dev.data(), Tier::Device, all.size());
    for (size_t i = 0; i < kGuard; ++i) {
      EXPECT_EQ(static_cast<unsigned char>(all[i]), kSentinel) << "write before the tensor, byte " << i;
      EXPECT_EQ(static_cast<unsigned char>(all[kGuard + h.bytes() + i]), kSentinel) << "write after the tensor";
    }
    return std::vector<char>(all.begin() + kGuard, all.begin() + std::ptrdiff_t(kGuard + h.bytes()));
  }
  std::vector<float> device_f32() const {
    const auto b = download();
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
  }
  std::vector<float> host_f32() const { return std::vector<float>(h.f(), h.f() + h.numel()); }
  void randn(uint64_t seed, float stddev = 1.0f) {
    const auto r = oomb::testing::randn(size_t(h.numel()), seed, stddev);
    std::memcpy(h.data, r.data(), r.size() * 4);
    upload();
  }
};

inline double err(const Pair& p) { return rel_error(p.device_f32(), p.host_f32()); }

// err for LSE, where -inf (a query that sees no key) must match exactly: -inf - -inf is NaN in err
inline double lse_err(const Pair& p) {
  std::vector<float> a = p.device_f32(), b = p.host_f32();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return INFINITY;
      a[i] = b[i] = 0.0f;
    }
  return rel_error(a, b);
}

#define REQUIRE_GPU() \
  if (!backends().cuda) GTEST_SKIP() << backends().why

inline void report(const char* op, double e, double tol) {
  EXPECT_LE(e, tol) << op;
  std::cout << fmt::format("[ parity   ] {:<14} rel. error {:.2e} (tolerance {:.0e})\n", op, e, tol);
}

}  // namespace oomb::testing
