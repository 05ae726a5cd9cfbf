#include "cli/best_record.h"

#include "core/error.h"

namespace oomb::cli {

std::string best_record_text(const BestRecord& r) {
  nlohmann::json j = {{"step", r.step}, {"eval_loss", r.eval_loss}};
  if (r.eval_targets >= 0) j["eval_targets"] = r.eval_targets;
  if (!r.eval_data.is_null()) j["eval_data"] = r.eval_data;
  if (!r.eval_windows.is_null()) j["eval_windows"] = r.eval_windows;
  return j.dump(2) + "\n";
}

BestRecord parse_best_record(const std::string& text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  // (one held-out set: its path and window count; several: a list of each, as long)
  auto list_of = [](const nlohmann::json& v, const auto& is) {
    if (!v.is_array() || v.size() < 2) return false;
    for (const nlohmann::json& x : v)
      if (!is(x)) return false;
    return true;
  };
  auto is_path = [](const nlohmann::json& x) { return x.is_string(); };
  auto is_count = [](const nlohmann::json& x) { return x.is_number_integer() && x.get<int64_t>() > 0; };
  const bool object = j.is_object();
  const bool one = object && (!j.contains("eval_data") || is_path(j["eval_data"])) &&
                   (!j.contains("eval_windows") || is_count(j["eval_windows"]));
  const bool several = object && j.contains("eval_data") && j.contains("eval_windows") &&
                       list_of(j["eval_data"], is_path) && list_of(j["eval_windows"], is_count) &&
                       j["eval_data"].size() == j["eval_windows"].size();
  OOMB_CHECK(object && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() >= 1 &&
                 j.contains("eval_loss") && j["eval_loss"].is_number() &&
                 (!j.contains("eval_targets") ||
                  (j["eval_targets"].is_number_integer() && j["eval_targets"].get<int64_t>() >= 0)) &&
                 (one || several),
             "--save-best: {} is not oomb's record of a best model (step, eval_loss, eval_targets, eval_data, eval_windows); "
             "remove it or choose another directory",
             where);
  BestRecord r;
  r.step = j["step"].get<int64_t>();
  r.eval_loss = j["eval_loss"].get<double>();
  if (j.contains("eval_targets")) r.eval_targets = j["eval_targets"].get<int64_t>();
  if (j.contains("eval_data")) r.eval_data = j["eval_data"];
  if (j.contains("eval_windows")) r.eval_windows = j["eval_windows"];
  return r;
}

}  // namespace oomb::cli
