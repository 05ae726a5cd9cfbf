// Running the tests/dist programs and the oomb binary under mpirun for the test_dist_* suites: the
// launch line (every rank single-threaded, root allowed, oversubscribed), a figure from
// dist_check's output, a tiny model with tokens, and the common check against the single rank.
#pragma once
#include <algorithm>

#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>
#include <regex>
#include <string>

#include "model_fixture.h"
#include "test_util.h"

namespace oomb::testing {

#ifdef OOMB_MPIRUN
inline const char* const kMpirun = OOMB_MPIRUN;
#else
inline const char* const kMpirun = "";
#endif

// Why the tests cannot run here ("" when they can).
inline std::string mpi_missing() {
  if (std::string(kMpirun).empty()) return "this build found no MPI (install libopenmpi-dev and openmpi-bin)";
  if (!std::filesystem::exists(binary_dir() / "dist_check")) return "dist_check was not built";
  return "";
}

#define NEED_MPI()                                         \
  do {                                                     \
    if (!mpi_missing().empty()) OOMB_MISSING_REFERENCE(mpi_missing()); \
  } while (0)

// mpirun -np P prog args: every rank single-threaded (the ranks share the cores), root allowed
// (containers), oversubscribed (more ranks than cores).
// launch: what follows `mpirun --oversubscribe` (-np P prog args, or MPMD's `-np 1 a : -np 1 b`).
inline CmdResult mpirun_line(const std::string& launch, const std::string& env = "") {
  const auto dir = temp_dir("dist");
  const auto log = dir / "mpirun.log";
  const std::string cmd = fmt::format(
      "cd {} && {} OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
      // under make test-asan the ranks keep ASan's checks but not LeakSanitizer's: Open MPI keeps
      // allocations to exit in plugins it has unloaded by then, which no suppression can name
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 "
      "{} --oversubscribe {} > {} 2>&1", dir.string(), env, kMpirun, launch, log.string());
  const int rc = std::system(cmd.c_str());
  return {WEXITSTATUS(rc), read_text(log)};
}
// A shell command in dir, its output captured.
inline CmdResult run_cmd_in(const std::filesystem::path& dir, const std::string& cmd) {
  const auto log = dir / "cmd.log";
  const int rc = std::system(fmt::format("cd {} && {} > {} 2>&1", dir.string(), cmd, log.string()).c_str());
  return {WEXITSTATUS(rc), read_text(log)};
}
inline CmdResult mpirun(int np, const std::string& prog_and_args, const std::string& env = "") {
  return mpirun_line(fmt::format("-np {} {}", np, prog_and_args), env);
}

// The figure a dist_check line names ("name value (bound b)"), or -1 when absent.
inline double figure(const std::string& out, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("(^|\\n)" + name + " ([0-9.e+-]+)"))) return -1;
  return std::stod(m[2]);
}

// DIR/m (oomb init --preset tiny) and DIR/tokens.bin (4096 ids below the preset's 128) for the
// tests that run the oomb binary under mpirun.
inline bool tiny_model_and_tokens(const std::string& oomb, const std::filesystem::path& dir) {
  if (std::system(fmt::format("{} init --preset tiny --out {}/m > /dev/null", oomb, dir.string()).c_str()) != 0)
    return false;
  write_tokens(dir / "tokens.bin", 4096, 120, 5);
  return true;
}

// prog: dist_check, or simt_dist_check (the CUDA backend's code on the CPU)
inline CmdResult expect_equal_to_single_rank(int np, const std::string& args, const std::string& env = "",
                                             const std::string& prog = "dist_check") {
  const CmdResult r = mpirun(np, (binary_dir() / prog).string() + " " + args, env);
  SCOPED_TRACE("mpirun -np " + std::to_string(np) + " " + prog + " " + args + "\n" + r.out);
  std::cout << "[np " << np << " " << args << "]\n" << r.out;
  EXPECT_EQ(r.code, 0);
  // the gradients: 1e-6, or twice the single rank's own fp32 noise where that is larger (dist_check);
  // under bf16 the later steps' losses: twice bf16's own noise where larger, at most 1e-3 (dist_check
  // says why; absent, figure's -1 leaves 1e-6)
  const double noise = figure(r.out, "grad_noise_single_rank");
  const double train_noise = figure(r.out, "train_loss_noise_single_rank");
  for (const char* f : {"loss_rel_err", "grad_rel_err", "train_loss_rel_err"}) {
    const double v = figure(r.out, f);
    EXPECT_GE(v, 0) << f << " missing";
    const std::string name = f;
    EXPECT_LE(v, name == "grad_rel_err"         ? std::max(1e-6, 2 * noise)
                 : name == "train_loss_rel_err" ? std::min(1e-3, std::max(1e-6, 2 * train_noise))
                                                : 1e-6)
        << f;
  }
  // after AdamW steps (dist_check says why the bound is wider than the gradients')
  EXPECT_GE(figure(r.out, "weights_rel_err"), 0);
  EXPECT_LE(figure(r.out, "weights_rel_err"), 1e-4);
  EXPECT_EQ(figure(r.out, "plan_mismatches"), 0);
  EXPECT_EQ(figure(r.out, "kv_per_rank_vs_single_over_sp"), 0);
  return r;
}

// --sp-head-chunks K against K = 1 on the same ranks (dist_check's figures): the same bits, and the
// peaks' difference equal to the plans' (besides expect_equal_to_single_rank's checks)
inline CmdResult expect_head_chunks_equal_to_one(int np, const std::string& args,
                                                 const std::string& prog = "dist_check") {
  const CmdResult r = expect_equal_to_single_rank(np, args, "", prog);
  SCOPED_TRACE(args + "\n" + r.out);
  EXPECT_EQ(figure(r.out, "head_chunks_vs_one_differing"), 0);
  EXPECT_EQ(figure(r.out, "head_chunks_vs_one_trained_differing"), 0);
  EXPECT_EQ(figure(r.out, "head_chunk_saving_vs_plan_mismatches"), 0);
  EXPECT_GT(figure(r.out, "head_chunk_saving_bytes"), 0);
  return r;
}

}  // namespace oomb::testing
