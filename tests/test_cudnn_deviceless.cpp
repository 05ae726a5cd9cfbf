// cuDNN's verdict on oomb's attention graphs (src/backend/sdpa_graph.h), with no GPU: deviceless
// plan building (cuDNN >= 9.8) for an H100, described by tests/fixtures/cudnn/h100_sxm_deviceprop.json,
// on CUDA's stub driver. cuDNN checks the graph against its fused attention engines, picks an
// engine and compiles its kernel; only loading the kernel into a driver fails, and that is what
// "accepted" means here. On a machine with a GPU the plans load as well. Whether the kernels compute
// attention is tests/test_sdpa_graph.cpp's question (the same graphs, evaluated on the CPU) and the
// attention lab's on a GPU (dev/attention_lab.cpp, against the CPU reference).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/sdpa_graph.h"
#ifdef OOMB_HAVE_CUDA
#include <dlfcn.h>

#include "backend/cuda/cudnn/cudnn_sdpa.h"
#endif

namespace {

#ifdef OOMB_HAVE_CUDA
using oomb::sdpa::Shape;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "no device properties at " << path;
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string fixture_path(const char* name) { return std::string(OOMB_SOURCE_DIR) + "/tests/fixtures/cudnn/" + name; }

// OOMB_CUDNN_DEVICEPROP: another GPU's properties (scripts/gpu_session.sh passes the lent GPU's)
std::string fixture() {
  const char* other = std::getenv("OOMB_CUDNN_DEVICEPROP");
  return read_text(other && *other ? std::string(other) : fixture_path("h100_sxm_deviceprop.json"));
}

// every GPU described here: the H100 (written by hand), the H200 (cuDNN's own serialisation, from
// the device tool's machine, 2026-11-28), and OOMB_CUDNN_DEVICEPROP's if set
std::vector<std::pair<std::string, std::string>> fixtures() {
  std::vector<std::pair<std::string, std::string>> all;
  for (const char* name : {"h100_sxm_deviceprop.json", "h200_deviceprop.json"})
    all.push_back({name, read_text(fixture_path(name))});
  if (const char* other = std::getenv("OOMB_CUDNN_DEVICEPROP"); other && *other) all.push_back({other, read_text(other)});
  return all;
}

// cuDNN dlopens libcuda.so.1: where no driver is installed, CUDA's stub (whose soname that is),
// loaded first, answers it. Returns why cuDNN cannot be asked here, or "".
std::string prepare() {
  if (!::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) &&
      !::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) &&
      !::dlopen(OOMB_CUDA_STUB_LIBCUDA, RTLD_NOW | RTLD_GLOBAL))
    return std::string("neither a CUDA driver nor the toolkit's stub ") + OOMB_CUDA_STUB_LIBCUDA + " loads";
  const size_t v = oomb::cuda::cudnn::version_code();
  if (v == 0) return "no cuDNN: " + oomb::cuda::cudnn::version();
  if (v < 90800) return "cuDNN " + oomb::cuda::cudnn::version() + " predates deviceless plans (9.8)";
  return "";
}

#define SKIP_WITHOUT_CUDNN()                          \
  do {                                                \
    const std::string why_ = prepare();               \
    if (!why_.empty()) GTEST_SKIP() << why_;          \
  } while (0)

struct Case {
  const char* name;
  Shape shape;
};

class Deviceless : public ::testing::TestWithParam<Case> {};

TEST_P(Deviceless, CudnnAcceptsForwardAndBackward) {
  SKIP_WITHOUT_CUDNN();
  std::string said;
  ASSERT_NO_THROW(said = oomb::cuda::cudnn::build_deviceless(GetParam().shape, fixture()));
  std::printf("[ cudnn ] %s: %s\n", GetParam().name, said.c_str());
  EXPECT_NE(said.find("forward engine"), std::string::npos) << said;
  EXPECT_NE(said.find("backward engine"), std::string::npos) << said;
}

// Qwen2.5-0.5B (14 heads over 2, d 64) and 7B (28 over 4, d 128) at a chunk over earlier keys, with o,
// do, dq in bf16 as the backend asks; MHA; a chunk alone (square, causal); lengths off the tile
// sizes; non-causal. (With o, do, dq in fp32 the first deterministic backward engine fails to
// compile: DevicelessSurvey prints it.)
constexpr auto bf16 = oomb::sdpa::DType::bf16;
INSTANTIATE_TEST_SUITE_P(
    Shapes, Deviceless,
    ::testing::Values(Case{"qwen2.5-0.5b heads, C 512 over 2048 keys", {14, 2, 512, 2048, 64, 0.125f, true, bf16}},
                      Case{"qwen2.5-7b heads, C 256 over 1024 keys", {28, 4, 256, 1024, 128, 0.088388f, true, bf16}},
                      // the backend's runs: a chunk's own keys (causal, square) and an earlier run
                      // shorter than the chunk (all visible), GQA
                      Case{"the backend's own-chunk run", {28, 4, 512, 512, 128, 0.088388f, true, bf16}},
                      Case{"the backend's partial earlier run", {28, 4, 512, 100, 128, 0.088388f, false, bf16}},
                      Case{"MHA, a chunk alone", {4, 4, 128, 128, 64, 0.125f, true}},
                      Case{"lengths off the tiles", {4, 2, 190, 700, 64, 0.125f, true}},
                      Case{"MQA, non-causal", {4, 1, 64, 96, 128, 0.088388f, false}}),
    [](const ::testing::TestParamInfo<Case>& i) { return "case" + std::to_string(i.index); });

// Every engine config cuDNN offers for the forward and backward graphs at 7B's heads, with o, do,
// dq in bf16 (the backend's) and in fp32 (what it asked before the first H200 run), and how far
// each got (printed: what a GPU session's --cudnn-survey will see). The first deterministic engine
// of each bf16 graph, the one the backend takes, must compile: with fp32 the backward's does not
// (engine 6, NVRTC, as on the H200).
TEST(DevicelessSurvey, TheBackendsEnginesCompile) {
  SKIP_WITHOUT_CUDNN();
  for (auto out : {oomb::sdpa::DType::bf16, oomb::sdpa::DType::f32})
    for (const char* which : {"forward", "backward"}) {
      const Shape sh{28, 4, 1024, 1024, 128, 0.088388f, true, out};
      const auto g = std::string(which) == "forward" ? oomb::sdpa::forward(sh) : oomb::sdpa::backward(sh);
      bool first = true;
      for (const auto& t : oomb::cuda::cudnn::survey(g, which, fixture())) {
        std::printf("[ cudnn ] %s, o/do/dq %s: engine %ld (%s): workspace %ld B; %s\n", which, oomb::sdpa::name(out),
                    long(t.index), t.deterministic ? "deterministic" : "nondeterministic", long(t.workspace),
                    t.status.c_str());
        if (out == oomb::sdpa::DType::bf16 && t.deterministic && first) {
          first = false;
          const bool compiled = t.status.empty() || t.status.find("EXECUTION_FAILED_CUDA_DRIVER") != std::string::npos;
          EXPECT_TRUE(compiled) << which << ": engine " << t.index << ": " << t.status;
        }
      }
      if (out == oomb::sdpa::DType::bf16) {
        EXPECT_FALSE(first) << which << ": no deterministic engine offered";
      }
    }
}

// The workspace the CUDA backend plans for cuDNN (cudnn_attention_workspace, backend.h) against
// what cuDNN's chosen engines ask for, for the calls the backend makes (a block of the chunk's
// queries, cudnn_query_block, over the chunk's own keys up to the block's end, causal, or over
// earlier keys in runs of at most T, all visible; bf16 o, do, dq) at the heads of the models oomb
// runs, and at the small shapes of the CUDA tests (chunks off cuDNN's 128-query tile: on the H200
// the plan, which rounded queries to 64, refused them): never less (the route would refuse the
// run), and for a full block over T keys within 5% and 8 KiB (the plan is what is used, not a
// guess on the safe side). The blocks keep cuDNN's dS within kCudnnDsBytes: 7B's chunk of 4096
// goes in blocks of 1024 (its dS 235 MB, not 940 MB). For each GPU described (fixtures()).
TEST(DevicelessWorkspace, PlannedCoversWhatCudnnAsksForTheBackendsRuns) {
  SKIP_WITHOUT_CUDNN();
  struct Run {
    const char* model;
    int64_t H, G, D, T, R;
    bool causal;
  };
  const Run runs[] = {
      {"qwen2.5-0.5b", 14, 2, 64, 128, 128, true},  {"qwen2.5-0.5b", 14, 2, 64, 128, 100, false},
      {"qwen2.5-1.5b", 12, 2, 128, 1000, 1000, true}, {"qwen2.5-7b", 28, 4, 128, 4096, 4096, true},
      {"qwen2.5-7b", 28, 4, 128, 4096, 1000, false}, {"llama-3.1-8b", 32, 8, 128, 2048, 2048, false},
      {"qwen3-0.6b", 16, 8, 128, 8192, 8192, true},  {"MHA", 16, 16, 64, 512, 512, true},
      // test_cuda_ops' and test_cuda_model's shapes (OOMB_CUDNN_MIN_QUERIES=1), the attention lab's
      {"test 5", 2, 1, 8, 5, 5, true},                {"test 33", 4, 2, 16, 33, 33, true},
      {"test 33 over 16", 4, 2, 16, 33, 16, false},   {"test 70", 8, 8, 128, 70, 70, true},
      {"test 64", 6, 2, 64, 64, 64, true},            {"model 29", 4, 2, 8, 29, 29, true},
      {"model 29 over 16", 4, 2, 8, 29, 16, false},   {"model 14", 4, 2, 8, 14, 14, true},
      {"model 130", 4, 2, 8, 130, 130, true},         {"lab 190", 4, 2, 64, 190, 190, true},
      {"qwen2.5-0.5b", 14, 2, 64, 300, 300, true},    {"qwen2.5-0.5b", 14, 2, 64, 8192, 8192, true},
  };
  for (const auto& [gpu, prop] : fixtures()) {
    for (const Run& r : runs) {
      size_t asked = 0;
      const int64_t tq = oomb::cudnn_query_block(r.T, r.H);
      // cuDNN's dS for a block, as it pads it (the queries to 128, the keys to 64), within the bound
      EXPECT_LE(double(((tq + 127) / 128 * 128) * ((r.T + 63) / 64 * 64) * r.H * 2), double(oomb::kCudnnDsBytes))
          << r.model << ": blocks of " << tq << " queries";
      const std::string said = oomb::cuda::cudnn::build_deviceless(
          Shape{r.H, r.G, tq, r.R, r.D, 0.088388f, r.causal, oomb::sdpa::DType::bf16}, prop, &asked);
      const size_t planned = oomb::cudnn_attention_workspace(r.T, r.H, r.G, r.D);
      std::printf("[ cudnn ] %s: %s, chunk of %ld, blocks of %ld queries over %ld keys: cuDNN asks %zu B, planned %zu B "
                  "(%s)\n", gpu.c_str(), r.model, long(r.T), long(tq), long(r.R), asked, planned, said.c_str());
      EXPECT_GT(asked, 0u) << gpu << ": " << r.model;
      EXPECT_GE(planned, asked) << gpu << ": " << r.model << " T " << r.T << " R " << r.R;
      if (r.R == r.T) {
        EXPECT_LE(double(planned), 1.05 * double(asked) + 8192) << gpu << ": " << r.model << " T " << r.T;
      }
    }
  }
}

// The control: the same forward with P left in fp32 before the second matmul (cuDNN requires its
// operands in one type) is refused, so the test above can fail.
TEST(DevicelessControl, CudnnRefusesAGraphItCannotFuse) {
  SKIP_WITHOUT_CUDNN();
  oomb::sdpa::Graph g = oomb::sdpa::forward({4, 2, 128, 256, 64, 0.125f, true});
  bool changed = false;
  for (const auto& n : g.nodes)
    if (n.name == "bmm2")
      for (auto& t : g.tensors)
        if (t.uid == n.x) t.dtype = oomb::sdpa::DType::f32, changed = true;
  ASSERT_TRUE(changed);
  try {
    oomb::cuda::cudnn::build_deviceless(g, fixture(), "forward with P in fp32");
    FAIL() << "cuDNN accepted a graph whose second matmul mixes fp32 and bf16";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("forward with P in fp32"), std::string::npos) << e.what();
    std::printf("[ cudnn ] refused as it should: %s\n", e.what());
  }
}

TEST(DevicelessControl, BadDevicePropertiesNameTheField) {
  SKIP_WITHOUT_CUDNN();
  try {
    oomb::cuda::cudnn::build_deviceless(Shape{4, 2, 128, 256, 64, 0.125f, true}, "{\"maxGridSize\": [1, 1, 1]}");
    FAIL() << "incomplete device properties were accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("device properties"), std::string::npos) << e.what();
  }
}

#else

TEST(Deviceless, CudnnAcceptsForwardAndBackward) { GTEST_SKIP() << "this build has no CUDA (nvcc not found)"; }

#endif

}  // namespace
