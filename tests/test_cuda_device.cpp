// Device memory goes through the accountant, one device backend kind at a time; skipped (with the reason) when no GPU is visible.
// Built against simt (tests/simt) too, in every build, nvcc or not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "core/memory.h"
#include "test_util.h"
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)
#include "backend/cuda/cuda_device.h"
#endif

using namespace oomb;
using namespace oomb::testing;

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

// One device backend kind at a time: the simulated device cannot start while CUDA's memory is
// allocated (its allocator would free CUDA's buffers, and hand out host memory to CUDA's kernels),
// nor CUDA while the simulated device's is; either starts once the other's memory is gone.
TEST(CudaDevice, TheSimulatedDeviceAndCudaDoNotMix) {
#if !defined(OOMB_HAVE_CUDA) && !defined(OOMB_SIMT)
  GTEST_SKIP() << "this build has no CUDA backend (nvcc not found at configure time)";
#else
  std::string why;
  if (!cuda::device_available(&why)) GTEST_SKIP() << why;
  ASSERT_EQ(Accountant::global().total(Tier::Device).current, 0);
  cuda::install_device_allocator();
  {
    Buffer b(Tier::Device, Tag::KV, 4000);
    EXPECT_THAT(error_of([] { make_sim_backend(); }),
                ::testing::HasSubstr("a second kind of device backend cannot start while the first holds 3.9 KiB of device memory"));
  }
  {
    auto sim = make_sim_backend();
    Buffer b(Tier::Device, Tag::KV, 4000);
    EXPECT_THAT(error_of([] { cuda::install_device_allocator(); }), ::testing::HasSubstr("--device sim or cuda"));
  }
  cuda::install_device_allocator();  // the simulated device's memory is gone: CUDA's again
  Buffer b(Tier::Device, Tag::KV, 4);
  const float x = 1.5f;
  float back = 0;
  cuda::copy_to_device(b.data(), &x, 4);
  cuda::copy_to_host(&back, b.data(), 4);
  EXPECT_EQ(back, x);
  EXPECT_FALSE(device_memory_is_host());
#endif
}
