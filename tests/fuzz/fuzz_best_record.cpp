// fuzz-sources: cli/best_record.cpp
// Feeds bytes as --save-best's oomb_best.json to parse_best_record: only oomb::Error may come out,
// and naming the file; a record that parses has a step of at least 1 and a path and a positive
// window count per held-out set (or none recorded), and survives best_record_text -> parse
// unchanged.
#include <cstdint>
#include <string>

#include "cli/best_record.h"
#include "core/error.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  oomb::cli::BestRecord r;
  try {
    r = oomb::cli::parse_best_record(text, "best/oomb_best.json");
  } catch (const oomb::Error& e) {
    check(std::string(e.what()).find("best/oomb_best.json") != std::string::npos, "the error names the file");
    return 0;
  }
  check(r.step >= 1, "a step of at least 1");
  check(r.eval_data.is_null() || r.eval_data.is_string() || (r.eval_data.is_array() && r.eval_data.size() >= 2),
        "a path, or a list of two or more");
  check(r.eval_targets >= -1, "targets recorded (>= 0) or not (-1)");
  auto positive = [](const nlohmann::json& x) { return x.is_number_integer() && x.get<int64_t>() > 0; };
  if (r.eval_windows.is_array()) {
    for (const nlohmann::json& x : r.eval_windows) check(positive(x), "a positive window count per set");
  } else {
    check(r.eval_windows.is_null() || positive(r.eval_windows), "a positive window count");
  }
  if (r.eval_data.is_array() || r.eval_windows.is_array())
    check(r.eval_data.is_array() && r.eval_windows.is_array() && r.eval_data.size() == r.eval_windows.size(),
          "a list of paths with a list of window counts, as long");
  const oomb::cli::BestRecord again = oomb::cli::parse_best_record(oomb::cli::best_record_text(r), "again");
  check(again.step == r.step && again.eval_targets == r.eval_targets && again.eval_data == r.eval_data &&
            again.eval_windows == r.eval_windows,
        "the record read back is the record");
  check(again.eval_loss == r.eval_loss || (again.eval_loss != again.eval_loss && r.eval_loss != r.eval_loss),
        "the loss read back is the loss");
  return 0;
}
