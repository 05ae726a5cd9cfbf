// Running out of memory mid-run (the plan check overridden with --force): the error names the
// tier, the tag and what `oomb plan` says would fit, and a run at the length it names fits. The
// device: the simulated device's capacity (--device sim --device-memory); the host: a child under
// an address-space limit (ulimit -v, RLIMIT_AS), so the allocator itself fails; what it reckons is left
// must lie within the limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <regex>

#include "backend/backend.h"
#include "hf/config.h"
#include "model/memory_plan.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

struct CmdResult {
  int code;
  std::string out;
};

CmdResult sh(const std::filesystem::path& dir, const std::string& cmd) {
  const auto log = dir / "cmd.log";
  const int rc = std::system(fmt::format("bash -c '{}' > {} 2>&1", cmd, log.string()).c_str());
  return {WEXITSTATUS(rc), read_text(log)};
}

// "at most N = 123 fits at C = 64" of the advice: N, or -1.
int64_t fitting_n(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("at most N = ([0-9]+) fits at C = ([0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

class OutOfMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = temp_dir();
    oomb = (binary_dir() / "oomb").string();
    m = (dir / "m").string();
    d = (dir / "d.bin").string();
    write_tokens(d, 4097, 128, 1);
    ASSERT_EQ(sh(dir, oomb + " init --out " + m).code, 0);
  }
  std::filesystem::path dir;
  std::string oomb, m, d;
};

TEST_F(OutOfMemory, DeviceNamesTierTagAndWhatFits) {
  const ModelConfig cfg = load_config(m);
  int64_t need = 0;
  {
    auto be = make_sim_backend();
    const ChunkPlan p{64, 128};
    need = plan_memory(cfg, p, 1024, "adamw", be->workspace_bytes(workspace_shape(cfg, 64)), be->tier(),
                       be->pinned_workspace_bytes()).total(Tier::Device);
  }
  const int64_t cap = need - need / 8;  // below the plan: some allocation of the run is refused
  const std::string run = fmt::format("{} train --model {} --data {} --device sim --chunk-size 64 --steps 1 "
                                      "--device-memory {}", oomb, m, d, cap);
  const CmdResult r = sh(dir, run + " --seq-len 1024 --force");
  std::cout << r.out;
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("warning (--force): device memory: the plan needs"));
  EXPECT_TRUE(std::regex_search(r.out, std::regex("oomb: error: device memory: [0-9.]+ [KM]?i?B more for "
                                                  "(weights|grads|optimizer|activations|kv|kv_grad|workspace|data|io) "
                                                  "exceeds --device-memory " + std::to_string(cap))))
      << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("oomb plan: this run (N = 1024, C = 64) needs {} in device memory "
                                           "(--device-memory {})", format_bytes(need), cap)));
  const int64_t n = fitting_n(r.out);
  ASSERT_GT(n, 0) << r.out;
  ASSERT_LT(n, 1024);
  // the length it names runs within the same capacity, with no --force
  const CmdResult ok = sh(dir, run + fmt::format(" --seq-len {}", n));
  EXPECT_EQ(ok.code, 0) << ok.out;
}

TEST_F(OutOfMemory, HostNamesTierTagAndWhatFits) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "built with AddressSanitizer (make test-asan): its shadow memory reserves terabytes of address "
                  "space, which the test's ulimit -v forbids";
#endif
  // 8M tokens: 4 GiB of K/V pages in one reservation, under a 2 GiB address-space limit
  const std::string run = fmt::format("ulimit -v 2097152 && exec {} train --model {} --data {} --chunk-size 1024 "
                                      "--steps 1 --force", oomb, m, d);
  const CmdResult r = sh(dir, run + " --seq-len 8388608");
  std::cout << r.out;
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(std::regex_search(r.out, std::regex("oomb: error: host memory: allocating [0-9.]+ [KMG]i?B for "
                                                  "(kv|kv_grad) failed with [0-9.]+ [KM]?i?B in use")))
      << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("kv 4.00 GiB")));  // the failed allocation is no peak
  EXPECT_THAT(r.out, HasSubstr("oomb plan: this run (N = 8388608, C = 1024) needs"));
  EXPECT_THAT(r.out, HasSubstr("in host and pinned memory; within"));
  const int64_t n = fitting_n(r.out);
  EXPECT_GT(n, 0) << r.out;
  EXPECT_LT(n, 8388608);
  // what it reckons the host has left is within the limit (a step at ~1M tokens is too long for a test)
  std::smatch w;
  ASSERT_TRUE(std::regex_search(r.out, w, std::regex("within ([0-9.]+) (MiB|GiB)"))) << r.out;
  const double within = std::stod(w[1]) * (w[2] == "GiB" ? 1024.0 : 1.0);
  EXPECT_GT(within, 100.0);
  EXPECT_LE(within, 2048.0);
}

}  // namespace
