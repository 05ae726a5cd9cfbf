// fuzz-sources: data/mix_weights.cpp
// Feeds bytes as --data-weights (the first byte: how many sources, 1 to 8; the rest the text):
// only oomb::Error may come out, and weights returned are as many as asked, each in 1 .. 10^15, in
// lowest terms, and in the ratio of the decimals written (against strtod's reading of each, to
// 1e-9, where every one reads as a normal double).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/mix_weights.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t sources = 1 + data[0] % 8;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<int64_t> w;
  try {
    w = oomb::parse_data_weights(text, sources);
  } catch (const oomb::Error&) {
    return 0;
  }
  check(w.size() == sources, "one weight per source");
  int64_t g = 0;
  for (int64_t x : w) {
    check(x >= 1 && x <= oomb::kMaxDataWeight, "each weight in 1 .. 10^15");
    g = std::gcd(g, x);
  }
  check(g == 1, "in lowest terms");
  std::vector<double> read;  // strtod's reading of each item
  size_t at = 0;
  for (size_t i = 0; i < sources; ++i) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    read.push_back(std::strtod(item.c_str(), nullptr));
    at = comma + 1;
  }
  for (double x : read)
    if (!std::isnormal(x)) return 0;  // (beyond a double's range: the exact reading still holds)
  for (size_t i = 1; i < sources; ++i) {
    const double want = read[i] / read[0], got = double(w[i]) / double(w[0]);
    check(std::abs(got - want) <= 1e-9 * want, "the ratio of the decimals written");
  }
  return 0;
}
