// --save-best's record, DIR/oomb_best.json: the step and held-out loss of the model saved beside
// it, and the held-out windows that loss is over.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace oomb::cli {

struct BestRecord {
  int64_t step = 0;  // steps done when it was saved
  double eval_loss = 0;
  int64_t eval_targets = -1;  // -1: not recorded
  // --eval-data's path and window count, or with several sets a list of each, as long (null: not
  // recorded, as in records written before they were)
  nlohmann::json eval_data, eval_windows;
};

// The record as oomb_best.json holds it.
std::string best_record_text(const BestRecord& r);
// Reads a record; text that is not one is an error naming `where` (the file).
BestRecord parse_best_record(const std::string& text, const std::string& where);

}  // namespace oomb::cli
