// The transports and the faults with many ranks: MPI's group as device memory (NCCL's code path
// on the simulated device), one GPU shared over MPI, NCCL on two GPUs and its refusal, the check
// failing without the gradient sum, and oomb train's refusals and faults under mpirun (a bad world
// size, indivisible heads or chunk, ranks with other flags, a collective timing out, a rank dying).
#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>

#include "dist/mpirun_util.h"
#include "dist/nccl_comm.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

// NCCL's code path without NCCL: on --device sim, MPI's group presented as taking device memory.
// Ulysses packs on the device and sends from device staging, gradients are summed in place and
// shards staged on the device, and the plan puts that staging in the device's workspace.
TEST(Dist, DeviceMemoryGroupOnSim) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--sp 2 --device sim --comm sim-device");
  expect_equal_to_single_rank(4, "--sp 2 --dp 2 --zero 2 --doc-mask --device sim --comm sim-device --offload kv",
                              "OOMB_GRAD_SYNC_PIECE=1000");
  for (int z : {0, 1})
    expect_equal_to_single_rank(2, fmt::format("--dp 2 --zero {} --device sim --comm sim-device", z),
                                "OOMB_GRAD_SYNC_PIECE=1000");
  // pinned gradients (--offload params) cross over MPI's group, not the device group
  expect_equal_to_single_rank(2, "--dp 2 --zero 1 --device sim --comm sim-device --offload kv,params",
                              "OOMB_GRAD_SYNC_PIECE=1000");
}

// One GPU shared by two ranks over the MPI path (host staging): the one-GPU check.
TEST(Dist, TwoRanksSharingOneGpuOverMpi) {
  NEED_MPI();
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << "no GPU: " << why;
  expect_equal_to_single_rank(2, "--sp 2 --device cuda --comm mpi");
  expect_equal_to_single_rank(2, "--dp 2 --zero 2 --device cuda --comm mpi", "OOMB_GRAD_SYNC_PIECE=1000");
}

// NCCL, GPU to GPU: Ulysses' exchanges packed on the device, gradients summed and shards gathered
// without host staging. NCCL needs a GPU per rank.
TEST(Dist, NcclTwoRanksOnTwoGpus) {
  NEED_MPI();
  if (const std::string why = nccl_unavailable(2); !why.empty()) GTEST_SKIP() << why;
  expect_equal_to_single_rank(2, "--sp 2 --device cuda --comm nccl");
  expect_equal_to_single_rank(2, "--dp 2 --zero 2 --device cuda --comm nccl", "OOMB_GRAD_SYNC_PIECE=1000");
  expect_equal_to_single_rank(2, "--dp 2 --zero 1 --device cuda --comm nccl");
}

// --comm nccl where NCCL cannot serve (the CPU backend here): an error naming the flag and why.
TEST(Dist, NcclRefusedNamingWhy) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() + " --sp 2 --comm nccl");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--comm nccl: the cpu backend is not a GPU's"), std::string::npos) << r.out;
}

// Negative control: without the gradients' sum over ranks the check must fail.
TEST(Dist, CheckFailsWithoutTheGradientSum) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() + " --sp 2 --skip-reduce");
  std::cout << r.out;
  EXPECT_NE(r.code, 0);
  EXPECT_GT(figure(r.out, "grad_rel_err"), 1e-2);
}

// oomb train under mpirun: bad layouts and faults end with an error naming the flag or the call,
// never a hang (ctest's TIMEOUT is the only clock here).
TEST(Dist, WorldSizeMustBeSpTimesDp) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "oomb").string() + " train --steps 1 --seq-len 128 --sp 4");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--sp 4 x --dp 1 = 4 ranks, but mpirun started 2"), std::string::npos) << r.out;
}

TEST(Dist, HeadsAndChunkMustDivide) {
  NEED_MPI();
  CmdResult r = mpirun(4, (binary_dir() / "oomb").string() + " train --steps 1 --seq-len 128 --sp 4");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--sp 4: each rank takes heads / 4 and kv heads / 4"), std::string::npos) << r.out;
  r = mpirun(2, (binary_dir() / "oomb").string() + " train --steps 1 --seq-len 126 --chunk-size 63 --sp 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--chunk-size 63: not divisible by --sp 2"), std::string::npos) << r.out;
}

TEST(Dist, RanksWithOtherFlagsAreNamed) {
  NEED_MPI();
  const std::string oomb = (binary_dir() / "oomb").string();
  const CmdResult r = mpirun_line(fmt::format("-np 1 {0} train --dp 2 --seq-len 128 --steps 2 : -np 1 {0} train "
                                              "--dp 2 --seq-len 128 --steps 3", oomb));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("rank 1 runs with other flags than rank 0: rank 0 has `steps=2`, rank 1 has `steps=3`"),
            std::string::npos) << r.out;
}

TEST(Dist, CollectiveTimesOutNamingTheCall) {
  NEED_MPI();
  const CmdResult r =
      mpirun(2, (binary_dir() / "dist_check").string() + " --dp 2 --stall-rank 1 --dist-timeout 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("not finished after 2 s (--dist-timeout)"), std::string::npos) << r.out;
}

TEST(Dist, RankDyingMidStepEndsTheJob) {
  NEED_MPI();
  const CmdResult r = mpirun(2, (binary_dir() / "dist_check").string() + " --sp 2 --die-rank 1");
  EXPECT_NE(r.code, 0);
  // mpirun names the rank that died (its exit code 9) and ends the others
  EXPECT_NE(r.out.find("exited with non-zero status"), std::string::npos) << r.out;
}
