// Many ranks on the CUDA backend's own code, compiled for the CPU (simt_dist_check: dist_check built
// against simt), under `mpirun`: what a GPU session runs, checked here against the single rank as
// the CPU's runs are (loss, every gradient, the weights after AdamW steps, every rank's peaks
// against its plan, kv bytes / P).
//   --comm mpi          the one-GPU path: the ranks' tensors staged through host memory
//   --comm sim-device   MPI's group presented as taking device memory: NCCL's device side (the
//                       CUDA backend's packs, the staging on the device, gradients summed in place)
//                       without NCCL, each call after the compute stream's work as NCCL's are (in bf16
//                       too, and in simt's other order)
#include <gtest/gtest.h>

#include <filesystem>

#include "dist/mpirun_util.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {
const char* const kSimt = "simt_dist_check";
// half dist_check's default window (256 tokens in chunks of 64): simt's runs take minutes, each rank
// still several chunks and pages of 16
#define SIMT_SHAPE " --seq-len 128 --chunk-size 32"

#define NEED_SIMT_MPI()                                                                                     \
  do {                                                                                                      \
    NEED_MPI();                                                                                             \
    if (!std::filesystem::exists(binary_dir() / kSimt)) OOMB_MISSING_REFERENCE("no " + std::string(kSimt)); \
  } while (0)
}  // namespace

TEST(DistSimt, TwoRanksOverHostStaging) {
  NEED_SIMT_MPI();
  expect_equal_to_single_rank(2, "--sp 2 --device cuda --comm mpi" SIMT_SHAPE, "", kSimt);
  expect_equal_to_single_rank(2, "--dp 2 --zero 3 --device cuda --comm mpi --offload kv,params" SIMT_SHAPE,
                              "OOMB_GRAD_SYNC_PIECE=1000", kSimt);
}

// The head groups' buffers on the CUDA backend: the attention backward's scratch is a group's
// (the plan had counted every head's, 256 bytes over per rank at these chunks of 32)
TEST(DistSimt, HeadChunksOnTheDeviceGroup) {
  NEED_SIMT_MPI();
  expect_head_chunks_equal_to_one(
      2, "--sp 2 --heads 8 --kv-heads 4 --sp-head-chunks 2 --doc-mask --device cuda --comm sim-device" SIMT_SHAPE,
      kSimt);
}

TEST(DistSimt, FourRanksOnTheDeviceGroup) {
  NEED_SIMT_MPI();
  expect_equal_to_single_rank(4, "--sp 2 --dp 2 --zero 2 --doc-mask --device cuda --comm sim-device --offload kv" SIMT_SHAPE,
                              "OOMB_GRAD_SYNC_PIECE=1000", kSimt);
}

// bf16 (the GPU's default) across ranks over the device group, with simt's other order: threads,
// blocks and streams drained last to first, and every stream's work before each call (work on the
// copy stream then runs before the call, where it otherwise runs after it).
TEST(DistSimt, Bf16InTheOtherOrder) {
  NEED_SIMT_MPI();
  expect_equal_to_single_rank(2, "--sp 2 --precision bf16 --offload kv --device cuda --comm sim-device" SIMT_SHAPE,
                              "OOMB_SIMT_ORDER=reverse", kSimt);
}

// Negative control: without the gradients' sum over ranks the check fails here too.
TEST(DistSimt, CheckFailsWithoutTheGradientSum) {
  NEED_SIMT_MPI();
  const CmdResult r =
      mpirun(2, (binary_dir() / kSimt).string() + " --sp 2 --device cuda --comm sim-device --skip-reduce" SIMT_SHAPE);
  std::cout << r.out;
  EXPECT_NE(r.code, 0);
  EXPECT_GT(figure(r.out, "grad_rel_err"), 1e-2);
}
