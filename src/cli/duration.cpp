#include "cli/duration.h"

#include <cctype>
#include <cmath>
#include <stdexcept>

#include "core/error.h"

namespace oomb::cli {

double parse_duration(const std::string& s, const char* flag) {
  double total = 0;
  size_t i = 0;
  bool any = false;
  int last_rank = 5;  // units strictly from the largest down: d, h, m, s
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
    OOMB_CHECK(j > i, "{} '{}': not a duration (seconds, or e.g. 90s, 45m, 3h50m, 1d)", flag, s);
    double v = 0;
    try {
      size_t used = 0;
      v = std::stod(s.substr(i, j - i), &used);
      OOMB_CHECK(used == j - i, "{} '{}': not a duration (seconds, or e.g. 90s, 45m, 3h50m, 1d)", flag, s);
    } catch (const std::logic_error&) {
      fail("{} '{}': not a duration (seconds, or e.g. 90s, 45m, 3h50m, 1d)", flag, s);
    }
    const char unit = j < s.size() ? s[j] : 's';
    const double scale = unit == 'd' ? 86400 : unit == 'h' ? 3600 : unit == 'm' ? 60 : unit == 's' ? 1 : -1;
    OOMB_CHECK(scale > 0, "{} '{}': unknown unit '{}' (d, h, m, s)", flag, s, unit);
    const int rank = unit == 'd' ? 4 : unit == 'h' ? 3 : unit == 'm' ? 2 : 1;
    OOMB_CHECK(rank < last_rank, "{} '{}': each unit once, from the largest down (d, h, m, s)", flag, s);
    last_rank = rank;
    OOMB_CHECK(j < s.size() || !any, "{} '{}': a number without its unit after the first (d, h, m, s)", flag, s);
    total += v * scale;
    any = true;
    i = j + 1;
  }
  OOMB_CHECK(any && total > 0 && std::isfinite(total), "{} '{}': must be a positive duration", flag, s);
  return total;
}

}  // namespace oomb::cli
