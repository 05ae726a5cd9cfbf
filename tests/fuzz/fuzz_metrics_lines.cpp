// fuzz-sources: train/metrics_lines.cpp
// Feeds bytes as a resumed run's --metrics file (the first 2 bytes choose the step it resumes at)
// to metrics_before: nothing may be thrown; what it keeps is whole lines of the file, in order, each
// a JSON object whose integer "step" is below the resumed step, every such line kept; and keeping
// again keeps the same. first_foreign_line names the first whole line that is not a metrics line.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "train/metrics_lines.h"

static std::vector<std::string> whole_lines(const std::string& s) {
  std::vector<std::string> v;
  size_t at = 0;
  for (size_t nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1) v.push_back(s.substr(at, nl - at));
  return v;
}

// the line belongs to a step before `step`: compared as the numbers they are (an unsigned step
// beyond int64's range is not below any step)
static bool before(const std::string& line, int64_t step) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return false;
  const nlohmann::json& s = j["step"];
  if (s.is_number_unsigned()) return step > 0 && s.get<uint64_t>() < uint64_t(step);
  return s.get<int64_t>() < step;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  int16_t pick;
  std::memcpy(&pick, data, 2);
  const int64_t step = pick == INT16_MIN ? INT64_MIN : pick == INT16_MAX ? INT64_MAX : pick;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::string kept = oomb::metrics_before(text, step);
  check(kept.empty() || kept.back() == '\n', "whole lines only");
  const std::vector<std::string> in = whole_lines(text), out = whole_lines(kept);
  size_t i = 0, wanted = 0;
  for (const std::string& line : in) wanted += before(line, step) ? 1 : 0;
  for (const std::string& line : out) {
    check(before(line, step), "a kept line is an object of an earlier step");
    while (i < in.size() && in[i] != line) ++i;
    check(i < in.size(), "a kept line is a line of the file, in the file's order");
    ++i;
  }
  check(out.size() == wanted, "every line of an earlier step kept");
  check(oomb::metrics_before(kept, step) == kept, "keeping again keeps the same");
  // the first foreign line: not an object with a "step" (nor blank), every whole line before it one
  const int64_t foreign = oomb::first_foreign_line(text);
  check(foreign >= 0 && size_t(foreign) <= in.size(), "a line of the file, or none");
  auto ours = [](std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) return true;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    return j.is_object() && j.contains("step");
  };
  for (size_t k = 0; k < (foreign ? size_t(foreign) - 1 : in.size()); ++k) check(ours(in[k]), "lines before it are ours");
  check(foreign == 0 || !ours(in[size_t(foreign) - 1]), "it is not");
  check(oomb::first_foreign_line(kept) == 0, "what metrics_before keeps is ours");
  return 0;
}
