// Many ranks on the CPU: tests/dist/dist_check under `mpirun -np 2` and `-np 4` (oversubscribed)
// against the single-rank run (loss, every gradient, the weights after AdamW steps, per-rank
// memory against the plan), and `oomb train`'s refusals and faults with several ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>
#include <regex>

#include "test_util.h"

using namespace oomb::testing;

namespace {
#ifdef OOMB_MPIRUN
const char* kMpirun = OOMB_MPIRUN;
#else
const char* kMpirun = "";
#endif

// Why the tests cannot run here ("" when they can).
std::string missing() {
  if (std::string(kMpirun).empty()) return "this build found no MPI (install libopenmpi-dev and openmpi-bin)";
  if (!std::filesystem::exists(binary_dir() / "dist_check")) return "dist_check was not built";
  return "";
}

#define NEED_MPI()                                         \
  do {                                                     \
    if (!missing().empty()) OOMB_MISSING_REFERENCE(missing()); \
  } while (0)

// mpirun -np P prog args: every rank single-threaded (the ranks share the cores), root allowed
// (containers), oversubscribed (more ranks than cores).
// launch: what follows `mpirun --oversubscribe` (-np P prog args, or MPMD's `-np 1 a : -np 1 b`).
CmdResult mpirun_line(const std::string& launch, const std::string& env = "") {
  const auto dir = temp_dir("dist");
  const auto log = dir / "mpirun.log";
  const std::string cmd = fmt::format(
      "cd {} && {} OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
      "{} --oversubscribe {} > {} 2>&1", dir.string(), env, kMpirun, launch, log.string());
  const int rc = std::system(cmd.c_str());
  return {WEXITSTATUS(rc), read_text(log)};
}
CmdResult mpirun(int np, const std::string& prog_and_args, const std::string& env = "") {
  return mpirun_line(fmt::format("-np {} {}", np, prog_and_args), env);
}

// The figure a dist_check line names ("name value (bound b)"), or -1 when absent.
double figure(const std::string& out, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("(^|\\n)" + name + " ([0-9.e+-]+)"))) return -1;
  return std::stod(m[2]);
}

CmdResult expect_equal_to_single_rank(int np, const std::string& args, const std::string& env = "") {
  const CmdResult r = mpirun(np, (binary_dir() / "dist_check").string() + " " + args, env);
  SCOPED_TRACE("mpirun -np " + std::to_string(np) + " dist_check " + args + "\n" + r.out);
  std::cout << "[np " << np << " " << args << "]\n" << r.out;
  EXPECT_EQ(r.code, 0);
  for (const char* f : {"loss_rel_err", "grad_rel_err", "train_loss_rel_err"}) {
    const double v = figure(r.out, f);
    EXPECT_GE(v, 0) << f << " missing";
    EXPECT_LE(v, 1e-6) << f;
  }
  // after AdamW steps (dist_check says why the bound is wider than the gradients')
  EXPECT_GE(figure(r.out, "weights_rel_err"), 0);
  EXPECT_LE(figure(r.out, "weights_rel_err"), 1e-4);
  EXPECT_EQ(figure(r.out, "plan_mismatches"), 0);
  EXPECT_EQ(figure(r.out, "kv_per_rank_vs_single_over_sp"), 0);
  return r;
}
}  // namespace

TEST(Dist, SequenceParallelTwoRanks) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--sp 2");
}

TEST(Dist, SequenceParallelFourRanksQwen3DocMaskOffload) {
  NEED_MPI();
  expect_equal_to_single_rank(4, "--sp 4 --kv-heads 4 --arch qwen3 --doc-mask --device sim --offload kv");
}

TEST(Dist, DataParallelAccumulated) {
  NEED_MPI();
  expect_equal_to_single_rank(2, "--dp 2 --grad-accum 2");
}

TEST(Dist, ZeroOneAndTwo) {
  NEED_MPI();
  for (int z : {1, 2}) {
    const std::string args = fmt::format("--dp 2 --zero {}", z);
    const CmdResult r = expect_equal_to_single_rank(2, args);
    EXPECT_LE(figure(r.out, "optimizer_per_rank_vs_single_over_ranks"), 0.01) << r.out;
    if (z == 1) EXPECT_EQ(figure(r.out, "zero1_vs_zero0_weights_differing"), 0);
  }
}

TEST(Dist, CombinedSpDpZeroChunkedOffloadParams) {
  NEED_MPI();
  expect_equal_to_single_rank(4, "--sp 2 --dp 2 --zero 1 --doc-mask --device sim --offload kv,params");
}

// On a device the gradients and parameters cross through host staging a piece at a time: pieces of
// 1000 floats (OOMB_GRAD_SYNC_PIECE) make a tiny model take that path many times over.
TEST(Dist, DeviceStagingInPieces) {
  NEED_MPI();
  for (int z : {0, 1, 2}) {
    const CmdResult r = expect_equal_to_single_rank(
        2, fmt::format("--dp 2 --zero {} --device sim", z), "OOMB_GRAD_SYNC_PIECE=1000");
    if (z == 1) EXPECT_EQ(figure(r.out, "zero1_vs_zero0_weights_differing"), 0);
  }
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
