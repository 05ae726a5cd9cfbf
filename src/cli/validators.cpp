#include <cmath>
#include <string>

#include "cli/commands.h"

namespace oomb::cli {

static CLI::Validator number_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& s) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (...) {
          return "'" + s + "' is not a number";
        }
        if (used != s.size() || !std::isfinite(v)) return "'" + s + "' is not a finite number";
        if (allow_zero ? v < 0 : v <= 0) return std::string("must be ") + (allow_zero ? "0 or more" : "positive") + ", got " + s;
        return {};
      },
      allow_zero ? "NUMBER >= 0" : "NUMBER > 0");
}

CLI::Validator positive() { return number_check(false); }
CLI::Validator non_negative() { return number_check(true); }

}  // namespace oomb::cli
