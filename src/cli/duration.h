// --time-limit's durations: seconds, or units from the largest down (90s, 45m, 3h50m, 1d).
#pragma once
#include <string>

namespace oomb::cli {

// A duration: seconds ("90", "90s"), or a sum of days, hours, minutes and seconds ("1d", "3h50m",
// "2h30m15s"), each unit once, from the largest down; an error naming `flag` and `s` where it is
// not a positive, finite one.
double parse_duration(const std::string& s, const char* flag);

}  // namespace oomb::cli
