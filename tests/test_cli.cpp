// The oomb command end to end: init, train with the stable flags, metrics, --out, and its errors.
// (tokenize and training on text: test_text_commands.cpp)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>

#include <cstdlib>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <map>
#include <iostream>
#include <iterator>
#include <sstream>

#include "backend/backend.h"
#include "hf/config.h"
#include "hf/safetensors.h"
#include "metrics_plan.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

TEST(Cli, InitThenTrainWithTheStableFlags) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  CmdResult r = oomb_cmd(dir, fmt::format("init --preset tiny-qwen2 --dtype bf16 --seed 3 --out {}", m));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Qwen2ForCausalLM"));
  EXPECT_EQ(SafetensorsModel::open(m).get("model.embed_tokens.weight").dtype, DType::BF16);
  write_tokens(dir / "t.bin", 200, 128, 1);
  const auto out = (dir / "trained").string(), metrics = (dir / "m.jsonl").string();
  r = oomb_cmd(dir, fmt::format("train --model {} --data {} --seq-len 16 --steps 3 --optimizer adamw --lr 1e-3 "
                                "--weight-decay 0.1 --grad-clip 1 --warmup-steps 1 --device cpu --out {} --metrics {} --peak-tflops 2",
                                m, (dir / "t.bin").string(), out, metrics));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("step     3/3"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("step     1/3 \\|.* \\| [0-9]+s elapsed, ETA [0-9]+s"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("step     3/3 \\|.*, ETA 0s"));
  std::istringstream lines(read_text(metrics));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"], n);
    for (const char* k : {"loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu", "memory"}) EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_NEAR(j["mfu"].get<double>(), j["tflops"].get<double>() / 2.0, 1e-12);  // --peak-tflops 2
    EXPECT_GT(j["memory"]["host"]["weights"]["peak"].get<int64_t>(), 0);
    EXPECT_GT(j["memory"]["host"]["kv"]["peak"].get<int64_t>(), 0);
    ++n;
  }
  EXPECT_EQ(n, 3);
  // saved in the dtype it was loaded in, with a config that loads
  EXPECT_EQ(SafetensorsModel::open(out).get("model.embed_tokens.weight").dtype, DType::BF16);
  EXPECT_EQ(load_config(out).arch, Arch::Qwen2);
}

TEST(Cli, PlanPredictsTheMeasuredPeaks) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  int64_t kv_f32 = 0;
  for (auto [kv, dt] : {std::pair{"f32", "f32"}, {"f32", "bf16"}, {"bf16", "f32"}}) {
    SCOPED_TRACE(fmt::format("kv {} kv_grad {}", kv, dt));
    const std::string dtypes = fmt::format("--kv-dtype {} --kv-grad-dtype {}", kv, dt);
    CmdResult r = oomb_cmd(
        dir, fmt::format("plan --model {} --seq-len 512 --chunk-size 96 --page-size 32 {} --json", m, dtypes));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto plan = nlohmann::json::parse(r.out);
    r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 512 --chunk-size 96 --page-size 32 "
                                  "{} --steps 1 --metrics {}/m.jsonl", m, dir.string(), dtypes, dir.string()));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto host = nlohmann::json::parse(read_text(dir / "m.jsonl"))["memory"]["host"];
    for (const char* tag : {"weights", "grads", "optimizer", "activations", "kv", "kv_grad", "workspace", "data"})
      EXPECT_EQ(host[tag]["peak"].get<int64_t>(), plan["host"][tag].get<int64_t>()) << tag;
    // the loss tile holds a chunk's rows (96 here, not 256) of the 128-token vocabulary (one tile;
    // the rows' statistics are the model's, tag activations)
    EXPECT_EQ(host["workspace"]["peak"].get<int64_t>(), 96 * 128 * 4);
    const int64_t kv_peak = host["kv"]["peak"].get<int64_t>();
    if (std::string(kv) == "f32") kv_f32 = kv_peak;
    else EXPECT_EQ(2 * kv_peak, kv_f32) << "bf16 K/V pages take half the measured bytes";
  }
  // --precision bf16 rounds K and V to bf16 for attention's matmuls: its pages default to bf16
  // (--kv-dtype auto), giving f32 pages' loss and gradient norm in half the measured kv bytes, as planned
  nlohmann::json runs[2];
  for (int i = 0; i < 2; ++i) {
    const std::string flags = i == 0 ? "--precision bf16" : "--precision bf16 --kv-dtype f32";
    SCOPED_TRACE(flags);
    CmdResult r = oomb_cmd(
        dir, fmt::format("plan --model {} --seq-len 512 --chunk-size 96 --page-size 32 {} --json", m, flags));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto plan = nlohmann::json::parse(r.out);
    r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 512 --chunk-size 96 --page-size 32 "
                                  "{} --steps 1 --metrics {}/m.jsonl", m, dir.string(), flags, dir.string()));
    ASSERT_EQ(r.code, 0) << r.out;
    runs[i] = nlohmann::json::parse(read_text(dir / "m.jsonl"));
    EXPECT_EQ(runs[i]["memory"]["host"]["kv"]["peak"].get<int64_t>(), plan["host"]["kv"].get<int64_t>());
  }
  EXPECT_EQ(2 * runs[0]["memory"]["host"]["kv"]["peak"].get<int64_t>(),
            runs[1]["memory"]["host"]["kv"]["peak"].get<int64_t>());
  EXPECT_EQ(runs[1]["memory"]["host"]["kv"]["peak"].get<int64_t>(), kv_f32);
  for (const char* key : {"loss", "grad_norm"})
    EXPECT_EQ(std::bit_cast<uint64_t>(runs[0][key].get<double>()), std::bit_cast<uint64_t>(runs[1][key].get<double>()))
        << key;
}

// --offload params updates on the host beside the next step by default; --no-overlap-update after
// the step. Both give every step's loss and gradient norm bit for bit, and the same checkpoint
// (weights and AdamW moments, written after a step's update has finished) and final model, fp32
// and bf16.
TEST(Cli, OverlappedUpdateGivesTheSameRunAndCheckpoints) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 2000, 128, 3);
  for (const char* precision : {"fp32", "bf16"}) {
    std::vector<std::string> metrics, files;
    for (const char* overlap : {"", " --no-overlap-update"}) {
      SCOPED_TRACE(fmt::format("{}{}", precision, overlap));
      const auto run = dir / fmt::format("run_{}{}", precision, *overlap ? "_sync" : "");
      std::filesystem::create_directories(run);
      const CmdResult r = oomb_cmd(
          dir, fmt::format("train --model {} --data {}/t.bin --seq-len 256 --chunk-size 96 --steps 3 --device sim "
                           "--offload params --precision {} --save-every 2 --checkpoint-dir {} --out {} --metrics "
                           "{}/m.jsonl{}", m, dir.string(), precision, (run / "ckpt").string(), (run / "out").string(),
                           run.string(), overlap));
      ASSERT_EQ(r.code, 0) << r.out;
      std::string lines;
      for (std::istringstream in(read_text(run / "m.jsonl")); std::getline(in, lines);) {
        if (lines.empty()) continue;
        const auto j = nlohmann::json::parse(lines);
        metrics.push_back(fmt::format("{}: loss {:a} grad_norm {:a}", j["step"].get<int>(), j["loss"].get<double>(),
                                      j["grad_norm"].get<double>()));
      }
      std::string all;
      for (const auto& e : std::filesystem::recursive_directory_iterator(run))
        if (e.path().extension() == ".safetensors")
          all += std::filesystem::relative(e.path(), run).string() + ":" + read_text(e.path());
      files.push_back(all);
    }
    ASSERT_EQ(metrics.size(), 6u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(metrics[i], metrics[i + 3]) << precision;
    EXPECT_FALSE(files[0].empty());
    EXPECT_TRUE(files[0] == files[1]) << precision << ": the checkpoints or the final model differ";
  }
}

// The simulated device, with and without --offload kv and params, --precision bf16, dense and sparse
// (mean and quest scores), and --sweep layer (also on the CPU): every (tier, tag) peak equals the plan.
// `oomb plan --device cuda` names the part of the device workspace that cuDNN's attention takes,
// where this process would route attention through cuDNN (the library loads): the difference
// between its plan and OOMB_CUDA_ATTENTION=mma's, which names none. Without cuDNN (CI) both plans
// are the same and neither names it.
TEST(Cli, PlanNamesCudnnsShareOfTheWorkspace) {
  const auto dir = temp_dir();
  const std::string args = "plan --preset qwen2.5-0.5b --seq-len 8192 --chunk-size 4096 --device cuda --offload kv";
  auto plan = [&](const char* mode) {
    if (mode) setenv("OOMB_CUDA_ATTENTION", mode, 1);
    const CmdResult text = oomb_cmd(dir, args), json = oomb_cmd(dir, args + " --json");
    unsetenv("OOMB_CUDA_ATTENTION");
    EXPECT_EQ(text.code, 0) << text.out;
    EXPECT_EQ(json.code, 0) << json.out;
    return std::pair{text.out, nlohmann::json::parse(json.out)["device"]["workspace"].get<int64_t>()};
  };
  const auto [auto_text, auto_ws] = plan(nullptr);
  const auto [mma_text, mma_ws] = plan("mma");
  const std::string said = "of the device workspace, cuDNN's attention takes ";
  EXPECT_THAT(mma_text, Not(HasSubstr(said)));
  if (cudnn_attention_planned()) {
    EXPECT_GT(auto_ws, mma_ws);
    EXPECT_THAT(auto_text, HasSubstr(said + format_bytes(auto_ws - mma_ws) + " "));
  } else {
    EXPECT_EQ(auto_ws, mma_ws);
    EXPECT_THAT(auto_text, Not(HasSubstr(said)));
  }
}

// What a CUDA run's attention runs on, as the train banner says it: every OOMB_CUDA_ATTENTION mode
// and --precision; under auto, cuDNN named with its version where it loads, else why not.
TEST(Cli, CudaAttentionSummaryNamesWhatRunsAndWhy) {
  auto with = [](const char* mode, bool bf16) {
    if (mode) setenv("OOMB_CUDA_ATTENTION", mode, 1);
    const std::string s = cuda_attention_summary(bf16);
    unsetenv("OOMB_CUDA_ATTENTION");
    return s;
  };
  EXPECT_THAT(with(nullptr, false), HasSubstr("fp32 kernels (--precision fp32)"));
  EXPECT_THAT(with("reference", true), HasSubstr("fp32 reference kernels (OOMB_CUDA_ATTENTION=reference)"));
  EXPECT_THAT(with("mma", true), HasSubstr("tensor-core kernels (OOMB_CUDA_ATTENTION=mma)"));
  for (const char* mode : {static_cast<const char*>(nullptr), "auto", "cudnn"}) {
    const std::string s = with(mode, true);
    if (cudnn_attention_planned()) {
      EXPECT_THAT(s, HasSubstr("through cuDNN ")) << s;
      EXPECT_THAT(s, HasSubstr("at least 128 queries")) << s;
    } else {
      EXPECT_THAT(s, HasSubstr("tensor-core kernels (cuDNN: ")) << s;
    }
    EXPECT_EQ(s.find("OOMB_CUDA_ATTENTION=cudnn") != std::string::npos, mode && std::string(mode) == "cudnn") << s;
  }
  std::cout << "[ banner   ] " << with(nullptr, true) << "\n";
  setenv("OOMB_CUDA_ATTENTION", "fast", 1);  // a value it does not know: an error naming the variable
  const std::string e = error_of([] { cuda_attention_summary(true); });
  unsetenv("OOMB_CUDA_ATTENTION");
  EXPECT_THAT(e, HasSubstr("OOMB_CUDA_ATTENTION=fast: expected auto, cudnn, mma or reference"));
}

TEST(Cli, PlanPredictsTheMeasuredPeaksPerTier) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  for (const char* flags : {"--device sim", "--device sim --offload kv --offload-group 3",
                            "--device sim --offload kv --kv-dtype bf16 --kv-grad-dtype bf16",
                            "--device sim --offload kv --offload-group 2 --doc-mask --eos-id 5",
                            "--device sim --offload params", "--device sim --offload kv,params --offload-group 2",
                            "--device sim --precision bf16", "--device sim --offload kv --precision bf16",
                            "--device sim --offload params --precision bf16", "--device sim --lora-rank 4 --precision bf16",
                            "--device sim --sparse-pages 2 --sparse-tile 32",
                            "--device sim --offload kv --sparse-pages 2 --sparse-tile 48 --sparse-score quest",
                            "--sweep layer", "--device sim --sweep layer --precision bf16",
                            "--device sim --offload kv,params --offload-group 2 --sweep layer --doc-mask --eos-id 5",
                            "--device sim --offload kv,params --offload-group 2 --sweep layer --precision bf16"}) {
    SCOPED_TRACE(flags);
    const std::string shape = "--seq-len 512 --chunk-size 96 --page-size 32";
    CmdResult r = oomb_cmd(dir, fmt::format("plan --model {} {} {} --json", m, shape, plan_flags_of(flags)));
    ASSERT_EQ(r.code, 0) << r.out;
    auto plan = nlohmann::json::parse(r.out);
    r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin {} {} --steps 2 --metrics {}/m.jsonl", m,
                                  dir.string(), shape, flags, dir.string()));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto last = last_metrics_line(dir / "m.jsonl");
    const auto& mem = last["memory"];
    expect_peaks_equal_plan(mem, plan);
    // --metrics' bytes of K/V and gradient pages moved in a step (one sequence): the plan's count for
    // the order run, or at most it with sparse attention
    const auto moved = last["moved"];
    const auto& sw = plan["sweep"][plan["sweep"]["order"].get<std::string>()];  // the order the run takes
    const bool offload_kv = std::string(flags).find("--offload kv") != std::string::npos;
    EXPECT_EQ(moved["kv"].get<int64_t>() > 0, offload_kv);
    for (const char* what : {"kv", "kv_grads"}) {
      if (sw["kv_exact"].get<bool>())
        EXPECT_EQ(moved[what].get<int64_t>(), sw[what].get<int64_t>()) << what;
      else
        EXPECT_LE(moved[what].get<int64_t>(), sw[what].get<int64_t>()) << what;
    }
    if (std::string(flags).find("--offload-group") != std::string::npos) {  // smaller than a layer
      EXPECT_GT(mem["pinned"]["kv"]["peak"].get<int64_t>(), 0);
      EXPECT_LT(mem["device"]["kv"]["peak"].get<int64_t>(), mem["pinned"]["kv"]["peak"].get<int64_t>());
    }
  }
  // a checkpoint of a model on the device: its AdamW moments cross through a host piece, so the
  // host's io stays the load's copy (a host copy of both moments was 2 x 4 bytes a parameter more)
  const std::string shape = "--seq-len 512 --chunk-size 96 --page-size 32 --device sim";
  CmdResult r = oomb_cmd(dir, fmt::format("plan --model {} {} --json", m, shape));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto plan = nlohmann::json::parse(r.out);
  r = oomb_cmd(dir, fmt::format("train --model {0} --data {1}/t.bin {2} --steps 2 --save-every 1 --checkpoint-dir "
                                "{1}/ck --metrics {1}/ck.jsonl", m, dir.string(), shape));
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_TRUE(std::filesystem::exists(dir / "ck/step-000001/optimizer.safetensors"));
  expect_peaks_equal_plan(last_metrics_line(dir / "ck.jsonl")["memory"], plan);
  EXPECT_EQ(plan["host"]["io"].get<int64_t>(), param_count(load_config(m)) * 4);
}

// --sweep auto takes the order that moves fewer bytes (the plan's counts): the chunk order with
// resident parameters (it moves none), the layer order with --offload params over several chunks;
// the plan and the train banner name it, and a tied model's layer order (an array more) plans and
// measures the same peaks. --sweep layer plans with --sp (test_dist runs it). Without --sweep:
// auto with --offload params, chunk otherwise.
TEST(Cli, SweepAutoTakesTheOrderThatMovesFewerBytes) {
  const auto dir = temp_dir();
  write_tokens(dir / "t.bin", 600, 128, 1);
  for (const char* preset : {"tiny", "tiny-qwen2"}) {
    const auto m = (dir / preset).string();
    ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset {} --out {}", preset, m)).code, 0);
    for (const char* flags : {"--device sim", "--device sim --offload params"}) {
      SCOPED_TRACE(fmt::format("{} {}", preset, flags));
      const std::string shape = "--seq-len 512 --chunk-size 96 --page-size 32 --sweep auto";
      CmdResult r = oomb_cmd(dir, fmt::format("plan --model {} {} {} --json", m, shape, flags));
      ASSERT_EQ(r.code, 0) << r.out;
      const auto plan = nlohmann::json::parse(r.out);
      const auto& sw = plan["sweep"];
      const std::string want = sw["layer"]["total"].get<int64_t>() < sw["chunk"]["total"].get<int64_t>() ? "layer" : "chunk";
      EXPECT_EQ(sw["order"], want);
      EXPECT_EQ(want, std::string(flags).find("params") != std::string::npos ? "layer" : "chunk");
      r = oomb_cmd(dir, fmt::format("plan --model {} {} {}", m, shape, flags));
      EXPECT_THAT(r.out, HasSubstr("sweep auto -> " + want));
      r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin {} {} --steps 1 --metrics {}/m.jsonl", m,
                                    dir.string(), shape, flags, dir.string()));
      ASSERT_EQ(r.code, 0) << r.out;
      EXPECT_THAT(r.out, HasSubstr("sweep auto -> " + want));
      const auto mem = nlohmann::json::parse(read_text(dir / "m.jsonl"))["memory"];
      for (const char* tier : {"host", "device", "pinned"})
        for (const char* tag : {"weights", "grads", "optimizer", "activations", "kv", "kv_grad", "workspace", "data"}) {
          const int64_t measured = mem[tier].contains(tag) ? mem[tier][tag]["peak"].get<int64_t>() : 0;
          EXPECT_EQ(measured, plan[tier][tag].get<int64_t>()) << tier << " " << tag;
        }
    }
  }
  CmdResult r = oomb_cmd(dir, fmt::format("plan --model {}/tiny --seq-len 512 --sweep diagonal", dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--sweep"));
  r = oomb_cmd(dir, fmt::format("plan --model {}/tiny --seq-len 512 --sp 2 --sweep layer", dir.string()));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("sweep layer:"));
  // --sweep not given: auto with --offload params (the plan and the train banner say so), else chunk
  const std::string shape = fmt::format("--model {}/tiny --seq-len 512 --chunk-size 96 --page-size 32 --device sim",
                                        dir.string());
  r = oomb_cmd(dir, "plan " + shape + " --offload params");
  EXPECT_THAT(r.out, HasSubstr("sweep auto -> layer"));
  r = oomb_cmd(dir, fmt::format("train {} --data {}/t.bin --steps 1 --offload params", shape, dir.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("sweep auto -> layer"));
  r = oomb_cmd(dir, "plan " + shape + " --offload kv --json");
  EXPECT_EQ(nlohmann::json::parse(r.out)["sweep"]["order"], "chunk");
}

// --precision not given: bf16 on cuda (the plan's device is cuda with --offload), fp32 on cpu and
// sim; the plan counts the same bytes as with the flag given, and the two precisions differ (bf16
// images of the weights beside the fp32 masters). The train banner names the precision taken.
TEST(Cli, PrecisionDefaultsToBf16OnCudaAndFp32Elsewhere) {
  const auto dir = temp_dir();
  const std::string shape = "plan --preset qwen2.5-0.5b --seq-len 8192 --chunk-size 2048 --json ";
  auto plan = [&](const std::string& flags) {
    const CmdResult r = oomb_cmd(dir, shape + flags);
    EXPECT_EQ(r.code, 0) << flags << ": " << r.out;
    return nlohmann::json::parse(r.out);
  };
  for (const char* device : {"--device cuda", "--offload kv", "--device cpu", "--device sim", ""}) {
    SCOPED_TRACE(device);
    const bool cuda = std::string(device).find("cpu") == std::string::npos &&
                      std::string(device).find("sim") == std::string::npos && *device != '\0';
    const nlohmann::json dflt = plan(device);
    EXPECT_EQ(dflt["run"]["precision"], cuda ? "bf16" : "fp32");
    const nlohmann::json given = plan(fmt::format("{} --precision {}", device, cuda ? "bf16" : "fp32"));
    const nlohmann::json other = plan(fmt::format("{} --precision {}", device, cuda ? "fp32" : "bf16"));
    EXPECT_EQ(dflt["total"], given["total"]);
    EXPECT_NE(dflt["total"], other["total"]);
  }
  EXPECT_THAT(oomb_cmd(dir, "plan --preset qwen2.5-0.5b --seq-len 8192 --offload kv").out,
              HasSubstr("adamw, cuda bf16, kv offloaded"));
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  const CmdResult r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 256 --steps 1 --device sim",
                                                m, dir.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--device sim, --precision fp32"));
}

// oomb eval and oomb generate take --precision as train does (default fp32 off cuda): bf16 gives
// the same bits on the CPU and the simulated device and another loss than fp32, with and without a
// LoRA adapter (its frozen base held in bf16); the eval JSON says which.
TEST(Cli, EvalAndGenerateTakePrecision) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string(), ad = (dir / "ad").string(), t = (dir / "t.bin").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("train --model {} --data {} --seq-len 256 --steps 1 --lora-rank 4 --out {}", m, t,
                                      ad)).code, 0);
  auto eval = [&](const std::string& flags) {
    const CmdResult r = oomb_cmd(dir, fmt::format("eval --model {} --data {} --seq-len 256 --chunk-size 64 --json {}",
                                                  m, t, flags));
    EXPECT_EQ(r.code, 0) << flags << ": " << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    return std::pair{j["loss"].get<double>(), j["precision"].get<std::string>()};
  };
  for (const std::string& lora : {std::string(), " --lora " + ad}) {
    SCOPED_TRACE(lora);
    const auto dflt = eval("--device cpu" + lora), f32 = eval("--device sim --precision fp32" + lora),
               cpu16 = eval("--device cpu --precision bf16" + lora), sim16 = eval("--device sim --precision bf16" + lora);
    EXPECT_EQ(dflt.second, "fp32");
    EXPECT_EQ(cpu16.second, "bf16");
    EXPECT_EQ(dflt.first, f32.first);
    EXPECT_EQ(cpu16.first, sim16.first);
    EXPECT_NE(cpu16.first, f32.first);
  }
  std::string ids[2];
  for (int i = 0; i < 2; ++i) {
    const CmdResult r = oomb_cmd(dir, fmt::format("generate --model {} --prompt-ids 1,2,3 --max-new-tokens 6 "
                                                  "--precision bf16 --device {}", m, i ? "sim" : "cpu"));
    ASSERT_EQ(r.code, 0) << r.out;
    ids[i] = r.out;
  }
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_THAT(oomb_cmd(dir, "eval --model " + m + " --data " + t + " --precision fp16").out, HasSubstr("--precision"));
}

// oomb generate --lora DIR: the adapter on its base, no merge needed. Greedy ids equal those of the
// merged model (oomb merge) and differ from the base's; with bf16 on the simulated device as on the
// CPU; a directory that is no adapter is named.
TEST(Cli, GenerateWithAnAdapterEqualsTheMergedModel) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string(), ad = (dir / "ad").string(), merged = (dir / "merged").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 256 --steps 3 --lora-rank 8 "
                                      "--lora-targets all --lr 1e-2 --out {}", m, dir.string(), ad)).code, 0);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("merge --model {} --lora {} --out {}", m, ad, merged)).code, 0);
  auto generate = [&](const std::string& flags) {
    const CmdResult r = oomb_cmd(dir, "generate --prompt-ids 5,6,7,8,9 --max-new-tokens 12 " + flags);
    EXPECT_EQ(r.code, 0) << flags << ": " << r.out;
    return r.out;
  };
  const std::string base = generate("--model " + m), with = generate(fmt::format("--model {} --lora {}", m, ad));
  EXPECT_EQ(with, generate("--model " + merged));
  EXPECT_NE(with, base) << "the adapter changes nothing: the test cannot tell it was applied";
  EXPECT_EQ(generate(fmt::format("--model {} --lora {} --precision bf16 --device cpu", m, ad)),
            generate(fmt::format("--model {} --lora {} --precision bf16 --device sim", m, ad)));
  EXPECT_THAT(oomb_cmd(dir, fmt::format("generate --model {} --lora {} --prompt-ids 1", m, m)).out,
              HasSubstr("adapter_config.json"));
}

// --offload kv's bad input: a backend without device memory, a group larger than a layer's
// pages, a device too small for two groups; each named before any step.
TEST(Cli, OffloadErrorsNameTheFlag) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  const std::string run = fmt::format("train --model {} --data {}/t.bin --seq-len 512 --chunk-size 96 "
                                      "--page-size 32 --steps 1 ", m, dir.string());
  struct Bad {
    const char* flags;
    const char* says;
  };
  for (const Bad& b : {
           Bad{"--offload kv", "--offload kv: the cpu backend has no device memory to offload from"},
           Bad{"--offload params", "--offload params: the cpu backend has no device memory to offload from"},
           Bad{"--lora-rank 100 --precision bf16", "--lora-rank 100 with --precision bf16: at most"},
           Bad{"--device sim --offload kv --offload-group 17", "--offload-group 17: larger than a layer's 16 pages"},
           Bad{"--device sim --offload kv --offload-group 4 --device-memory 300000",
               "--device-memory 300000: too small for --offload kv: two groups of 4 pages"},
           Bad{"--device sim --device-memory 300000", "device memory: the plan needs"},
           Bad{"--device sim --device-memory 300000", "at N = 512, C = 96 (activations the most"},
           Bad{"--device sim --offload disk", "--offload: 'disk' is not one of kv"},
           Bad{"--device sim --offload-group 2", "--offload-group: only with --offload kv"},
           Bad{"--device-memory 1000000", "--device-memory: only for --device sim"},
       }) {
    SCOPED_TRACE(b.flags);
    const CmdResult r = oomb_cmd(dir, run + b.flags);
    EXPECT_NE(r.code, 0);
    EXPECT_THAT(r.out, HasSubstr(b.says));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("step ")));
  }
  // the same refusals from the planner
  CmdResult r = oomb_cmd(dir, fmt::format("plan --model {} --seq-len 512 --page-size 32 --offload kv --offload-group 17", m));
  EXPECT_THAT(r.out, HasSubstr("--offload-group 17: larger than a layer's 16 pages"));
  r = oomb_cmd(dir, fmt::format("plan --model {} --seq-len 512 --offload kv --device cpu", m));
  EXPECT_THAT(r.out, HasSubstr("--offload kv: the cpu backend has no device memory"));
  // LoRA's trainable embedding and norms over an offloaded base: not when the embedding is tied
  // (the lm_head would stream the frozen base's table), by oomb train and oomb plan
  const auto tied = (dir / "tied").string();
  ASSERT_EQ(oomb_cmd(dir, "init --tie-embeddings true --out " + tied).code, 0);
  const std::string lora = " --offload params --lora-rank 4 --train-embeddings-norms";
  const std::string says = "--offload params with --train-embeddings-norms on tied embeddings: not supported yet";
  r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 512 --chunk-size 96 --page-size 32 "
                                "--steps 1 --device sim{}", tied, dir.string(), lora));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(says));
  r = oomb_cmd(dir, fmt::format("plan --model {} --seq-len 512{}", tied, lora));
  EXPECT_THAT(r.out, HasSubstr(says));
}

// Saving after --offload params (and kv,params) writes the same files as without it: the trained
// model (--out) and a checkpoint (weights, AdamW's moments, state.json), byte for byte; with LoRA
// (the frozen base streamed) the adapter and its checkpoint likewise, and LongLoRA's too (the
// embedding and norms trainable: in the adapter as modules_to_save; on the model untied, as it
// needs with --offload params).
TEST(Cli, SavingAfterOffloadParamsWritesTheSameFiles) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  const auto untied = (dir / "untied").string();
  ASSERT_EQ(oomb_cmd(dir, "init --preset tiny-qwen2 --out " + m).code, 0);
  ASSERT_EQ(oomb_cmd(dir, "init --preset tiny-qwen2 --tie-embeddings false --out " + untied).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  for (const char* lora : {"", "--lora-rank 4 --lora-targets all", "--lora-rank 4 --train-embeddings-norms"}) {
    const std::string model = std::string(lora).find("embeddings") != std::string::npos ? untied : m;
    SCOPED_TRACE(lora);
    std::vector<std::map<std::string, std::string>> files;
    for (const char* offload : {"", "--offload params", "--offload kv,params --offload-group 1"}) {
      SCOPED_TRACE(offload);
      const auto run = dir / fmt::format("run{}-{}", files.size(), std::hash<std::string>{}(lora));
      const CmdResult r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 96 --chunk-size 32 "
                                                    "--page-size 16 --steps 3 --grad-accum 2 --lr 1e-2 --device sim {} {} "
                                                    "--out {}/out --checkpoint-dir {}/ckpt --save-every 3",
                                                    model, dir.string(), offload, lora, run.string(), run.string()));
      ASSERT_EQ(r.code, 0) << r.out;
      std::map<std::string, std::string> f;
      for (const char* sub : {"out", "ckpt/step-000003"})
        for (const auto& e : std::filesystem::directory_iterator(run / sub))
          f[std::string(sub) + "/" + e.path().filename().string()] = read_text(e.path());
      files.push_back(f);
    }
    ASSERT_GE(files[0].size(), 6u);  // config.json and model.safetensors; + optimizer.safetensors, state.json
    for (size_t i = 1; i < files.size(); ++i)
      for (const auto& [name, bytes] : files[0]) {
        ASSERT_TRUE(files[i].count(name)) << name;
        // config.toml records the run's flags, --offload among them, and state.json its size: they
        // differ by that alone (state.json's fields but the file list are compared in test_checkpoint)
        if (name.ends_with("/config.toml") || name.ends_with("/state.json")) continue;
        EXPECT_TRUE(files[i].at(name) == bytes) << name << " differs with offload case " << i;
      }
    EXPECT_NE(files[1].at("ckpt/step-000003/config.toml").find("offload"), std::string::npos);
    EXPECT_EQ(files[0].count("out/adapter_model.safetensors"), *lora ? 1u : 0u);
  }
}

// oomb generate: greedy ids from token ids, the same on the simulated device, reproducible samples
// per seed, and bad input named.
TEST(Cli, Generate) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  const std::string base = fmt::format("generate --model {} --prompt-ids 1,2,3,4,5,6,7 --max-new-tokens 6 "
                                       "--chunk-size 3 --no-stop-at-eos", m);
  const CmdResult cpu = oomb_cmd(dir, base);
  ASSERT_EQ(cpu.code, 0) << cpu.out;
  EXPECT_THAT(cpu.out, ::testing::MatchesRegex("([0-9]+ ){5}[0-9]+\\s*"));
  EXPECT_EQ(oomb_cmd(dir, base + " --device sim").out, cpu.out);
  const CmdResult s1 = oomb_cmd(dir, base + " --temperature 1 --top-p 0.9 --seed 5"),
                  s2 = oomb_cmd(dir, base + " --temperature 1 --top-p 0.9 --seed 5");
  EXPECT_EQ(s1.out, s2.out);
  // it stops at the end of sequence as any of the model's files names it: generation_config.json's
  // eos_token_id, or tokenizer_config.json's eos_token (found through added_tokens_decoder)
  std::istringstream greedy(cpu.out);
  std::vector<std::string> ids{std::istream_iterator<std::string>(greedy), std::istream_iterator<std::string>()};
  ASSERT_EQ(ids.size(), 6u);
  const std::string stop = ids[2];
  const size_t first = size_t(std::find(ids.begin(), ids.end(), stop) - ids.begin());
  const std::string until = fmt::format("{}", fmt::join(ids.begin(), ids.begin() + first + 1, " "));
  const std::string stopping = base.substr(0, base.find(" --no-stop-at-eos"));
  write_bytes(dir / "m" / "generation_config.json", fmt::format("{{\"eos_token_id\": [127, {}]}}", stop));
  EXPECT_EQ(oomb_cmd(dir, stopping).out.substr(0, until.size() + 1), until + "\n");
  EXPECT_EQ(oomb_cmd(dir, base).out, cpu.out);  // (--no-stop-at-eos)
  std::filesystem::remove(dir / "m" / "generation_config.json");
  write_bytes(dir / "m" / "tokenizer_config.json", fmt::format("{{\"eos_token\": \"<end>\", \"added_tokens_decoder\": "
                                                           "{{\"{}\": {{\"content\": \"<end>\"}}}}}}", stop));
  EXPECT_EQ(oomb_cmd(dir, stopping).out.substr(0, until.size() + 1), until + "\n");
  // (also where config.json names another eos_token_id: a chat model's end of turn beside the base's)
  nlohmann::json cfg = nlohmann::json::parse(read_text(dir / "m" / "config.json"));
  int other = 0;  // an id the greedy run never makes
  while (std::find(ids.begin(), ids.end(), std::to_string(other)) != ids.end()) ++other;
  cfg["eos_token_id"] = other;
  write_bytes(dir / "m" / "config.json", cfg.dump());
  EXPECT_EQ(oomb_cmd(dir, stopping).out.substr(0, until.size() + 1), until + "\n");
  std::filesystem::remove(dir / "m" / "tokenizer_config.json");
  EXPECT_THAT(oomb_cmd(dir, fmt::format("generate --model {} --prompt-ids 1,200", m)).out,
              HasSubstr("--prompt-ids: '200' is not a token id below 128"));
  EXPECT_THAT(oomb_cmd(dir, fmt::format("generate --model {} --prompt hello", m)).out,
              HasSubstr("--prompt needs a tokenizer"));
}

TEST(Cli, ErrorsNameTheFlagOrFile) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string();
  ASSERT_EQ(oomb_cmd(dir, "init --out " + m).code, 0);
  CmdResult r = oomb_cmd(dir, "init --out " + m);
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("already holds a model"));
  r = oomb_cmd(dir, fmt::format("train --model {} --data {}/missing.bin", m, dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("missing.bin: cannot open"));
  r = oomb_cmd(dir, "train --model " + m);
  EXPECT_THAT(r.out, HasSubstr("--data is required"));
  r = oomb_cmd(dir, "train --optimizer lion");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--optimizer"));
  r = oomb_cmd(dir, "init --preset huge --out " + (dir / "x").string());
  EXPECT_THAT(r.out, HasSubstr("unknown preset 'huge'"));
  write_tokens(dir / "t.bin", 50, 1000, 2);  // ids up to 999, the tiny model has 128
  r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --seq-len 8 --steps 1", m, dir.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("beyond the model's vocabulary (128)"));
  for (const char* bad : {"--lr -1", "--lr nan", "--grad-clip -1", "--seq-len 0", "--steps 0", "--chunk-size 0",
                          "--page-size 0", "--grad-accum 0", "--sparse-score bogus --sparse-pages 2",
                          "--sparse-score quest"}) {
    r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin {}", m, dir.string(), bad));
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_THAT(r.out, HasSubstr(std::string(bad).substr(0, std::string(bad).find(' ')))) << bad;
  }
  write_bytes(dir / "file", "x");
  r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --out {}/file", m, dir.string(), dir.string()));
  EXPECT_THAT(r.out, HasSubstr("exists and is not a directory"));  // before any training step
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("step ")));
  r = oomb_cmd(dir, "init --hidden 100 --heads 8 --out " + (dir / "y").string());
  EXPECT_THAT(r.out, HasSubstr("not a multiple of --heads"));
  std::string no_gpu;
  if (!make_cuda_backend(&no_gpu)) {  // on a machine with a GPU, --device cuda is valid
    r = oomb_cmd(dir, fmt::format("train --model {} --data {}/t.bin --device cuda", m, dir.string()));
    EXPECT_NE(r.code, 0);
    EXPECT_THAT(r.out, HasSubstr("--device cuda:"));
  }
}

}  // namespace

// LoRA through the CLI: train adapters, save them in PEFT's format, continue from them with --lora,
// merge them; the merged model's loss is the adapted model's. Flag errors name the flag.
TEST(Cli, LoraTrainContinueAndMerge) {
  const auto dir = temp_dir();
  const auto m = (dir / "m").string(), a1 = (dir / "a1").string(), a2 = (dir / "a2").string(),
             merged = (dir / "merged").string(), data = (dir / "t.bin").string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny-qwen2 --seed 3 --out {}", m)).code, 0);
  write_tokens(dir / "t.bin", 400, 128, 1);
  const std::string common = fmt::format("--model {} --data {} --seq-len 32 --chunk-size 16 --lr 1e-2", m, data);
  CmdResult r = oomb_cmd(dir, fmt::format("train {} --steps 3 --lora-rank 4 --lora-alpha 8 --lora-targets q,v,down "
                                          "--out {}", common, a1));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("LoRA: rank 4, alpha 8, on q_proj, v_proj, down_proj"));
  const auto cfg = nlohmann::json::parse(read_text(std::filesystem::path(a1) / "adapter_config.json"));
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["peft_type"], "LORA");
  r = oomb_cmd(dir, fmt::format("train {} --steps 2 --lora {} --out {}", common, a1, a2));
  ASSERT_EQ(r.code, 0) << r.out;
  r = oomb_cmd(dir, fmt::format("merge --model {} --lora {} --out {}", m, a2, merged));
  ASSERT_EQ(r.code, 0) << r.out;
  // the merged model computes what base + adapter compute: one step of SGD at a tiny lr prints the loss
  auto first_loss = [&](const std::string& args) {
    const CmdResult s = oomb_cmd(dir, fmt::format("train --data {} --seq-len 32 --chunk-size 16 --steps 1 "
                                                  "--optimizer sgd --lr 1e-9 {}", data, args));
    EXPECT_EQ(s.code, 0) << s.out;
    const auto at = s.out.find("loss ");
    return at == std::string::npos ? -1.0 : std::stod(s.out.substr(at + 5));
  };
  const double adapted = first_loss(fmt::format("--model {} --lora {}", m, a2)),
               plain = first_loss(fmt::format("--model {}", merged)), base = first_loss(fmt::format("--model {}", m));
  EXPECT_NEAR(plain, adapted, 1e-4 * adapted);  // the progress line's 4 decimals
  EXPECT_NE(adapted, base) << "the adapter changed nothing";
  // bad input, named
  EXPECT_THAT(oomb_cmd(dir, fmt::format("train {} --steps 1 --lora-rank 4 --lora-targets q,wq", common)).out,
              HasSubstr("--lora-targets: 'wq' is not a module LoRA can adapt"));
  EXPECT_THAT(oomb_cmd(dir, fmt::format("train {} --steps 1 --lora-rank 0", common)).out,
              HasSubstr("--lora-rank: must be at least 1"));
  EXPECT_THAT(oomb_cmd(dir, fmt::format("train {} --steps 1 --lora-alpha 4", common)).out,
              HasSubstr("--lora-alpha needs --lora-rank"));
  EXPECT_THAT(oomb_cmd(dir, fmt::format("train {} --steps 1 --lora {} --lora-rank 8", common, a1)).out,
              HasSubstr("--lora-rank 8 disagrees with --lora"));
  EXPECT_THAT(oomb_cmd(dir, fmt::format("train {} --steps 1 --lora {}", common, dir.string())).out,
              HasSubstr("no adapter_config.json"));
  // plan: LoRA beside full fine-tuning
  r = oomb_cmd(dir, "plan --preset qwen3-8b --seq-len 131072 --lora-rank 16");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("full fine-tuning, for comparison"));
  EXPECT_THAT(r.out, HasSubstr("LoRA saves"));
}
