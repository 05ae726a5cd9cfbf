#include "train/metrics_lines.h"

#include <nlohmann/json.hpp>

namespace oomb {

std::string metrics_before(const std::string& text, int64_t step) {
  std::string kept;
  size_t at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string_view line(text.data() + at, nl - at);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step")) continue;
    const nlohmann::json& s = j["step"];  // (an unsigned step beyond int64 is below no step, not negative)
    const bool earlier = s.is_number_unsigned() ? step > 0 && s.get<uint64_t>() < uint64_t(step)
                                                : s.is_number_integer() && s.get<int64_t>() < step;
    if (earlier) kept.append(line).append("\n");
  }
  return kept;
}

int64_t first_foreign_line(const std::string& text) {
  int64_t n = 0;
  size_t at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    ++n;
    std::string_view line(text.data() + at, nl - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step")) return n;
  }
  return 0;
}

}  // namespace oomb
