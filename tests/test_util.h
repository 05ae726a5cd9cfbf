// Shared helpers for tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace oomb::testing {

// ||a - b|| / max(||b||, tiny): the relative error of a whole tensor.
double rel_error(const float* a, const float* b, size_t n);
double rel_error(const std::vector<float>& a, const std::vector<float>& b);
std::vector<float> randn(size_t n, uint64_t seed, float stddev = 1.0f);
// A fresh, empty directory under the build tree's tmp/, named after the running test.
std::filesystem::path temp_dir(const std::string& hint = "");
std::string read_text(const std::filesystem::path& p);
void write_bytes(const std::filesystem::path& p, const std::string& bytes);

}  // namespace oomb::testing
