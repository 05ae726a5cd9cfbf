// Shared helpers for tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace oomb::testing {

// ||a - b|| / max(||b||, tiny): the relative error of a whole tensor.
double rel_error(const float* a, const float* b, size_t n);
double rel_error(const std::vector<float>& a, const std::vector<float>& b);
std::vector<float> randn(size_t n, uint64_t seed, float stddev = 1.0f);

// float64 helpers for checks against references written in tests
using Vec = std::vector<double>;
std::vector<float> to_f(const Vec& v);
Vec randd(size_t n, uint64_t seed, double stddev = 1.0);
// d f / d x by central differences in float64
Vec numgrad(const std::function<double(const Vec&)>& f, Vec x, double eps = 1e-6);
// A fresh, empty directory under the build tree's tmp/, named after the running test.
std::filesystem::path temp_dir(const std::string& hint = "");
std::string read_text(const std::filesystem::path& p);
void write_bytes(const std::filesystem::path& p, const std::string& bytes);

// The source tree and the build tree: the environment's OOMB_SOURCE_DIR / OOMB_BINARY_DIR when set
// (tests run from a bundle on another machine), else the paths this build was configured with.
std::filesystem::path source_dir();
std::filesystem::path binary_dir();

// An environment variable set for a scope, and restored (or unset) when it ends, however it ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// Under ThreadSanitizer (make test-tsan): true, said on stdout with `what`, and the caller leaves
// `what` out; elsewhere false. For what ThreadSanitizer cannot judge: OpenMP teams of several threads
// (libgomp is not instrumented, so its barriers read as races). (The controls that drop a wait on
// purpose are judged: what the dropped wait should order is held, every copy or the copies out
// (kHoldCopies) or the update's units (Optimizer::hold_update_for_test), and a held item runs only
// while the thread waiting for it is blocked, so the early read or overwrite is ordered with it.)
bool tsan_leaves_out(const std::string& what);

// The message of the oomb::Error that f throws, or "(no error)".
std::string error_of(const std::function<void()>& f);
// The loss of each progress line ("... loss X ...") of oomb train's output.
std::vector<double> losses_of(const std::string& out);

// The real tokenizer.json of an npm reference package ("qwen3" or "llama3"), installed into
// tools/node_modules by scripts/install-deps.sh; empty when it is not there.
std::filesystem::path npm_tokenizer_json(const std::string& name);
// GTEST_SKIP's reason when npm_tokenizer_json is empty.
std::string npm_missing_reason(const std::string& name);

// The Python that runs the PyTorch references: the environment's OOMB_TORCH_PYTHON when set (set it
// to a path without torch to check that CI=true fails), else the one found at configure time.
std::string torch_python();
// Whether torch_python() imports torch (checked once); when not, *why says what is missing.
bool torch_available(std::string* why);
// The oomb binary run with `args` (stdout and stderr into dir/cmd.log): its exit code and output.
struct CmdResult {
  int code;
  std::string out;
};
// prog: oomb, or simt_oomb (oomb on the CUDA backend's code compiled for the CPU)
CmdResult oomb_cmd(const std::filesystem::path& dir, const std::string& args, const std::string& prog = "oomb");

// True when the environment variable CI is "true" (or "1"): a missing external reference
// (PyTorch, the npm tokenizer packages) is then a failure, not a skip.
bool under_ci();

}  // namespace oomb::testing

// In a test body or SetUp: skips with `reason`, or fails under CI=true (no silent passes in CI).
#define OOMB_MISSING_REFERENCE(reason)                                                                       \
  do {                                                                                                       \
    if (::oomb::testing::under_ci()) {                                                                       \
      FAIL() << "CI=true and an external reference is missing: " << (reason);                                 \
    } else {                                                                                                 \
      GTEST_SKIP() << (reason);                                                                              \
    }                                                                                                        \
  } while (0)

namespace oomb::testing {

}  // namespace oomb::testing
