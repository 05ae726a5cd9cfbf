#include "data/mix_weights.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <numeric>

#include "core/error.h"

namespace oomb {

namespace {

// One weight as written, exactly: digits with an optional fraction and an optional exponent
// ("0.7", "3", "2e-1", ".5"), read as m x 10^e with m's leading and trailing zeros dropped (at most
// 15 significant digits); false for anything else.
bool read_decimal(const std::string& s, int64_t& m, int64_t& e) {
  std::string digits;
  int64_t exp = 0;
  size_t i = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) digits += s[i];
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) digits += s[i], --exp;
  if (digits.empty()) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const bool minus = ++i < s.size() && s[i] == '-';
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    int64_t x = 0;
    const size_t from = i;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) x = std::min<int64_t>(x * 10 + (s[i] - '0'), 1 << 20);
    if (i == from) return false;
    exp += minus ? -x : x;
  }
  if (i != s.size()) return false;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return m = 0, e = 0, true;  // zero
  const size_t last = digits.find_last_not_of('0');
  exp += int64_t(digits.size() - 1 - last);
  digits = digits.substr(first, last + 1 - first);
  if (digits.size() > 15) return false;
  m = std::stoll(digits), e = exp;
  return true;
}

}  // namespace

std::vector<int64_t> lowest_terms(std::vector<int64_t> w) {
  int64_t g = 0;
  for (int64_t x : w) g = std::gcd(g, x);
  for (int64_t& x : w) x /= g;
  return w;
}

std::vector<int64_t> parse_data_weights(const std::string& s, size_t sources) {
  std::vector<std::pair<int64_t, int64_t>> read;  // m, e
  size_t at = 0;
  while (true) {
    const size_t comma = s.find(',', at);
    std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    item.erase(0, item.find_first_not_of(' '));  // ("0.7, 0.3")
    item.erase(item.find_last_not_of(' ') + 1);
    int64_t m = 0, e = 0;
    OOMB_CHECK(read_decimal(item, m, e) && m > 0, "--data-weights {}: '{}' is not a number > 0 written in decimal (one "
               "per --data, comma-separated, e.g. 0.7,0.3; at most 15 significant digits)", s, item);
    read.emplace_back(m, e);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  OOMB_CHECK(read.size() == sources, "--data-weights {}: {} weight{} for {} --data source{}", s, read.size(),
             read.size() == 1 ? "" : "s", sources, sources == 1 ? "" : "s");
  // each m x 10^(e - the least e): whole numbers in the weights' exact ratio
  int64_t least = read[0].second;
  for (const auto& [m, e] : read) least = std::min(least, e);
  std::vector<int64_t> w;
  for (const auto& [m, e] : read) {
    int64_t x = m;
    for (int64_t k = least; k < e; ++k) {  // (stops at the 16th digit: a span of 2^20 fails at once)
      OOMB_CHECK(x <= kMaxDataWeight / 10, "--data-weights {}: the weights span more than 15 digits (their ratio "
                 "is kept exactly)", s);
      x *= 10;
    }
    w.push_back(x);
  }
  return lowest_terms(w);
}

}  // namespace oomb
