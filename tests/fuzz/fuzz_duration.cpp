// fuzz-sources: cli/duration.cpp
// Feeds bytes as --time-limit's duration to parse_duration: only oomb::Error may come out; a
// duration that parses is positive and finite, written in digits, dots and the units d, h, m, s,
// each unit at most once and from the largest down; a plain number reads as strtod reads it, and
// the same with "s" after it.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/duration.h"
#include "core/error.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s(reinterpret_cast<const char*>(data), size);
  double t = 0;
  try {
    t = oomb::cli::parse_duration(s, "--time-limit");
  } catch (const oomb::Error&) {
    return 0;
  }
  check(t > 0 && std::isfinite(t), "a positive, finite duration");
  std::string units;
  for (char c : s) {
    check((c >= '0' && c <= '9') || c == '.' || c == 'd' || c == 'h' || c == 'm' || c == 's', "digits, dots, units");
    if (c == 'd' || c == 'h' || c == 'm' || c == 's') units += c;
  }
  const std::string order = "dhms";
  for (size_t i = 1; i < units.size(); ++i)
    check(order.find(units[i - 1]) < order.find(units[i]), "each unit once, from the largest down");
  if (units.empty()) {  // a plain number of seconds
    check(t == std::strtod(s.c_str(), nullptr), "a plain number reads as strtod reads it");
    check(oomb::cli::parse_duration(s + "s", "--time-limit") == t, "N and Ns are the same");
  }
  return 0;
}
