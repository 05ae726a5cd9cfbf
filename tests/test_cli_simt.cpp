// `oomb ... --device cuda` end to end on the CUDA backend's code compiled for the CPU (simt_oomb): the
// command line's own CUDA paths (the plan's CUDA workspace and cuDNN's buffers, the device limit,
// the banner) and what a GPU session runs through it. `oomb plan --device cuda` equals every (tier,
// tag) peak `oomb train --metrics` measures; a run killed and resumed from its checkpoints ends bit
// for bit where the uninterrupted run does; eval and generate in fp32 give the CPU's figures and
// tokens; two ranks under mpirun give one rank's losses (scripts/gpu_session.sh's dist_mpi_sp2);
// OOMB_CUDA_TIMELINE's figures in --metrics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "dist/mpirun_util.h"
#include "metrics_plan.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
namespace fs = std::filesystem;

namespace {
const char* const kSimt = "simt_oomb";

#define NEED_SIMT_OOMB()                                                                            \
  do {                                                                                              \
    if (!fs::exists(binary_dir() / kSimt)) OOMB_MISSING_REFERENCE("no " + std::string(kSimt)); \
  } while (0)

CmdResult simt(const fs::path& dir, const std::string& args) { return oomb_cmd(dir, args, kSimt); }

// A tiny model (oomb init) and 600 tokens below its vocabulary in dir.
std::string model_and_tokens(const fs::path& dir) {
  const std::string m = (dir / "m").string();
  EXPECT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  return m;
}

// Every step's loss in a --metrics file.
std::map<int64_t, double> losses(const fs::path& p) {
  std::map<int64_t, double> m;
  std::string line;
  for (std::istringstream in(read_text(p)); std::getline(in, line);)
    if (!line.empty()) {
      const auto j = nlohmann::json::parse(line);
      m[j["step"].get<int64_t>()] = j["loss"].get<double>();
    }
  return m;
}
}  // namespace

// fp32 and bf16 (the default on cuda); cuDNN's route (its stand-in: OOMB_CUDNN_MIN_QUERIES=32 lets
// the 96-query chunks take it, and the plan counts its buffers); offloaded pages, parameters, the
// layer order, documents, LoRA, sparse pages.
TEST(CliSimt, PlanEqualsTheMeasuredPeaksOnCuda) {
  NEED_SIMT_OOMB();
  const auto dir = temp_dir();
  const std::string m = model_and_tokens(dir), shape = "--seq-len 512 --chunk-size 96 --page-size 32";
  for (const char* flags : {"--precision fp32", "", "--offload kv --offload-group 3",
                            "--offload kv,params --offload-group 2 --sweep layer --doc-mask --eos-id 5",
                            "--offload params --precision fp32", "--lora-rank 4",
                            "--offload kv --sparse-pages 2 --sparse-tile 48 --sparse-score quest"}) {
    // cuDNN's route: bf16 calls that see their keys by causality alone (no documents, no sparse pages)
    const std::string f = flags;
    const bool dense_bf16 = f.find("fp32") == std::string::npos && f.find("--doc-mask") == std::string::npos &&
                            f.find("--sparse") == std::string::npos;
    int64_t workspace_without = 0;
    for (const bool cudnn : {false, true}) {
      if (cudnn && !dense_bf16) continue;
      std::optional<ScopedEnv> min_queries;
      if (cudnn) min_queries.emplace("OOMB_CUDNN_MIN_QUERIES", "32");
      SCOPED_TRACE(fmt::format("{}--device cuda {}", cudnn ? "OOMB_CUDNN_MIN_QUERIES=32 " : "", flags));
      CmdResult r = simt(dir, fmt::format("plan --model {} {} --device cuda {} --json", m, shape, plan_flags_of(f)));
      ASSERT_EQ(r.code, 0) << r.out;
      const auto plan = nlohmann::json::parse(r.out);
      // the route's buffers are planned (and measured below) only where it is taken
      const int64_t workspace = plan["device"]["workspace"].get<int64_t>();
      if (!cudnn) workspace_without = workspace;
      else EXPECT_GT(workspace, workspace_without);
      r = simt(dir, fmt::format("train --model {} --data {}/t.bin {} --device cuda {} --steps 2 --metrics {}/m.jsonl",
                                m, dir.string(), shape, flags, dir.string()));
      ASSERT_EQ(r.code, 0) << r.out;
      expect_peaks_equal_plan(last_metrics_line(dir / "m.jsonl")["memory"], plan);
    }
  }
}

// Killed (SIGKILL) once its step-3 checkpoint is complete, then --resume auto: every later loss and
// the final weights as the uninterrupted run's, bit for bit (bf16, with --offload params' host update).
TEST(CliSimt, ResumedRunEqualsTheUninterruptedOne) {
  NEED_SIMT_OOMB();
  const auto dir = temp_dir();
  const std::string m = model_and_tokens(dir);
  const std::string run = fmt::format("train --model {} --data {}/t.bin --seq-len 256 --chunk-size 64 --device cuda "
                                      "--offload params --steps 8 --log-every 1", m, dir.string());
  const std::string d = dir.string();
  ASSERT_EQ(simt(dir, fmt::format("{0} --metrics {1}/full.jsonl --out {1}/full", run, d)).code, 0);
  // the first run in the background, killed once step-000003 is complete (or once it has ended by
  // itself: the checks below then say which); a step takes seconds here, the polling 0.1 s
  const std::string prog = (binary_dir() / kSimt).string();
  const std::string script = fmt::format(
      "cd {0} && ({1} {2} --save-every 1 --checkpoint-dir ck --metrics a.jsonl > a.log 2>&1 & p=$!; "
      "while kill -0 $p 2> /dev/null && [ ! -f ck/step-000003/state.json ]; do sleep 0.1; done; kill -9 $p; "
      "wait $p 2> /dev/null; true)", dir.string(), prog, run);
  ASSERT_EQ(std::system(script.c_str()), 0);
  ASSERT_TRUE(fs::exists(dir / "ck" / "step-000003")) << read_text(dir / "a.log");
  const CmdResult r = simt(dir, fmt::format("{0} --save-every 1 --checkpoint-dir {1}/ck --resume auto --metrics "
                                            "{1}/b.jsonl --out {1}/resumed", run, d));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto full = losses(dir / "full.jsonl"), resumed = losses(dir / "b.jsonl");
  ASSERT_FALSE(resumed.empty()) << "the first run was killed after its last step: nothing was resumed";
  std::cout << "resumed steps " << resumed.begin()->first << " to " << resumed.rbegin()->first << " of "
            << full.size() << std::endl;
  for (const auto& [step, loss] : resumed) {
    ASSERT_EQ(full.count(step), 1u) << step;
    EXPECT_EQ(loss, full.at(step)) << "step " << step;
  }
  EXPECT_EQ(read_text(dir / "resumed" / "model.safetensors"), read_text(dir / "full" / "model.safetensors"));
}

// OOMB_CUDA_TIMELINE through the command line: each --metrics line gains the step's "streams" (with
// --offload params the copy stream carries weights and gradients), stderr the whole run's line, and
// the losses keep their bits; without it, no "streams".
TEST(CliSimt, StreamTimelineInTheMetrics) {
  NEED_SIMT_OOMB();
  const auto dir = temp_dir();
  const std::string m = model_and_tokens(dir), d = dir.string();
  const std::string run = fmt::format("train --model {} --data {}/t.bin --seq-len 256 --chunk-size 64 --device cuda "
                                      "--offload params --steps 2 --metrics {}/", m, d, d);
  CmdResult r = simt(dir, run + "off.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("OOMB_CUDA_TIMELINE"), std::string::npos) << r.out;
  {
    const ScopedEnv timeline("OOMB_CUDA_TIMELINE", "1");
    r = simt(dir, run + "on.jsonl");
  }
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("oomb CUDA timeline (OOMB_CUDA_TIMELINE)"), std::string::npos) << r.out;
  EXPECT_EQ(losses(dir / "on.jsonl"), losses(dir / "off.jsonl"));
  int lines = 0;
  std::string line;
  for (std::istringstream in(read_text(dir / "on.jsonl")); std::getline(in, line);) {
    const auto s = nlohmann::json::parse(line).at("streams");
    SCOPED_TRACE(s.dump());
    ++lines;
    EXPECT_GT(s["ops"].get<int64_t>(), 0);
    EXPECT_GT(s["copies"].get<int64_t>(), 0);
    const double compute = s["compute_s"], copy = s["copy_s"], both = s["both_s"], idle = s["idle_s"];
    EXPECT_GT(compute, 0);
    EXPECT_GT(copy, 0);
    EXPECT_LE(both, std::min(compute, copy) + 1e-12);
    EXPECT_NEAR(compute + copy - both + idle, s["span_s"].get<double>(), 1e-6);
    // both ways: the layers' weights in, their gradients out (each copy stream's union is copy_s)
    const double copy_in = s["copy_in_s"], copy_out = s["copy_out_s"], duplex = s["duplex_s"];
    EXPECT_GT(copy_in, 0);
    EXPECT_GT(copy_out, 0);
    EXPECT_NEAR(copy_in + copy_out - duplex, copy, 1e-6);
  }
  EXPECT_EQ(lines, 2);
  for (std::istringstream in(read_text(dir / "off.jsonl")); std::getline(in, line);)
    EXPECT_FALSE(nlohmann::json::parse(line).contains("streams"));
}

// fp32 on both: oomb eval's loss by position, and greedy generation's tokens.
TEST(CliSimt, EvalAndGenerateGiveTheCpus) {
  NEED_SIMT_OOMB();
  const auto dir = temp_dir();
  const std::string m = model_and_tokens(dir);
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("train --model {0} --data {1}/t.bin --seq-len 256 --chunk-size 64 --steps 3 "
                                      "--out {1}/trained", m, d)).code, 0);
  std::map<std::string, nlohmann::json> eval;
  std::map<std::string, std::string> tokens;
  for (const std::string device : {"cpu", "cuda"}) {
    const std::string prog = device == "cuda" ? kSimt : "oomb";
    CmdResult r = oomb_cmd(dir, fmt::format("eval --model {1}/trained --data {1}/t.bin --seq-len 256 --chunk-size 64 "
                                            "--device {0} --precision fp32 --out {1}/ev_{0}.json", device, d), prog);
    ASSERT_EQ(r.code, 0) << r.out;
    eval[device] = nlohmann::json::parse(read_text(dir / ("ev_" + device + ".json")));
    r = oomb_cmd(dir, fmt::format("generate --model {}/trained --device {} --precision fp32 --prompt-ids 5,6,7,8 "
                                  "--max-new-tokens 12", d, device), prog);
    ASSERT_EQ(r.code, 0) << r.out;
    tokens[device] = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  }
  std::cout << "generated (cpu): " << tokens["cpu"] << std::endl;
  EXPECT_EQ(std::count(tokens["cpu"].begin(), tokens["cpu"].end(), ' '), 11) << tokens["cpu"];  // 12 ids
  EXPECT_EQ(tokens["cuda"], tokens["cpu"]);
  const auto& a = eval["cuda"]["loss_by_position"];
  const auto& b = eval["cpu"]["loss_by_position"];
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 1u);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i]["loss"].get<double>() / b[i]["loss"].get<double>() - 1));
  std::cout << "loss by position (" << a.size() << " buckets): worst relative difference " << worst << std::endl;
  EXPECT_LE(worst, 1e-5);
  EXPECT_NEAR(eval["cuda"]["loss"].get<double>(), eval["cpu"]["loss"].get<double>(),
              1e-5 * eval["cpu"]["loss"].get<double>());
}

// Two ranks (--sp 2) sharing the device over MPI's host staging log one rank's losses (fp32), as
// scripts/gpu_session.sh's dist_mpi_sp2 step checks on a GPU.
TEST(CliSimt, TwoRanksLogOneRanksLosses) {
  NEED_SIMT_OOMB();
  NEED_MPI();
  const auto dir = temp_dir();
  const std::string m = model_and_tokens(dir);
  const std::string run = fmt::format("train --model {} --data {}/t.bin --device cuda --precision fp32 --steps 3 "
                                      "--seq-len 256 --chunk-size 64 --log-every 1 --comm mpi", m, dir.string());
  ASSERT_EQ(simt(dir, run + " --metrics " + (dir / "one.jsonl").string()).code, 0);
  const CmdResult r = mpirun(2, (binary_dir() / kSimt).string() + " " + run + " --sp 2 --metrics " +
                                    (dir / "two.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto one = losses(dir / "one.jsonl"), two = losses(dir / "two.jsonl");
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(two.size(), 3u);
  for (const auto& [step, loss] : one) EXPECT_NEAR(two.at(step), loss, 1e-6 * loss) << "step " << step;
}
