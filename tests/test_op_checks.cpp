// Op inputs are checked once, for every backend (src/backend/op_checks.cpp): the CPU backend and
// the simulated device refuse each bad call of op_check_cases.h with the same message, and the
// CUDA backend too (test_cuda_ops.cpp, on a GPU).
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "op_check_cases.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

// First in this file: no simulated device yet, so device memory is not host memory here.
TEST(OpChecks, TensorsInMemoryTheBackendDoesNotComputeOnAreRefused) {
  ASSERT_FALSE(device_memory_is_host());
  auto cpu = make_cpu_backend();
  std::vector<float> mem(64);
  Tensor x(mem.data(), DType::F32, {2, 3}, Tier::Device), w(mem.data(), DType::F32, {4, 3}, Tier::Host),
      y(mem.data(), DType::F32, {2, 4}, Tier::Host);
  EXPECT_EQ(error_of([&] { cpu->linear_fwd(x, w, nullptr, y); }),
            "linear_fwd: x is in device memory; the cpu backend computes on host memory");
  x.tier = Tier::Pinned;  // pinned memory is host memory: the same call goes through
  EXPECT_EQ(error_of([&] { cpu->linear_fwd(x, w, nullptr, y); }), "(no error)");
}

TEST(OpChecks, CpuAndSimRefuseEveryBadCallWithOneMessage) {
  auto cpu = make_cpu_backend();
  auto sim = make_sim_backend();
  const std::vector<BadCall> cases = bad_calls();
  ASSERT_GE(cases.size(), 20u);
  for (Backend* be : {cpu.get(), sim.get()})
    for (const BadCall& c : cases) EXPECT_EQ(error_of([&] { c.call(*be); }), c.message) << be->name();
}
