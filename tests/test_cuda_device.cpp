// Device memory goes through the accountant; skipped (with the reason) when no GPU is visible.
// Built against simt (tests/simt) too, in every build, nvcc or not.
#include <gtest/gtest.h>

#include <vector>

#include "core/memory.h"
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)
#include "backend/cuda/cuda_device.h"
#endif

using namespace oomb;

TEST(CudaDevice, AllocationsAreAccountedAndRoundTrip) {
#if !defined(OOMB_HAVE_CUDA) && !defined(OOMB_SIMT)
  GTEST_SKIP() << "this build has no CUDA backend (nvcc not found at configure time)";
#else
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << why;
  cuda::install_device_allocator();
  const auto before = Accountant::global().get(Tier::Device, Tag::KV).current;
  std::vector<float> host(1000), back(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) * 0.5f;
  {
    Buffer b(Tier::Device, Tag::KV, host.size() * 4);
    EXPECT_EQ(Accountant::global().get(Tier::Device, Tag::KV).current - before, 4000);
    cuda::copy_to_device(b.data(), host.data(), 4000);
    cuda::copy_to_host(back.data(), b.data(), 4000);
  }
  EXPECT_EQ(back, host);
  EXPECT_EQ(Accountant::global().get(Tier::Device, Tag::KV).current, before);
#endif
}
