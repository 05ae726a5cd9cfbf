#include "cli/save_best.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace oomb::cli {

void add_save_best(const std::string& dir, const nlohmann::json& eval_data, const nlohmann::json& eval_windows,
                   int64_t start_step, Dist& dist, const StepStats& last, TrainHooks& hooks, const SaveModel& save) {
  namespace fs = std::filesystem;
  double best = std::numeric_limits<double>::infinity();
  const fs::path record = fs::path(dir) / "oomb_best.json";
  if (dist.leader() && start_step > 0 && fs::exists(record)) {
    std::ifstream in(record);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    // (one held-out set: its path and window count; several: a list of each, as long)
    auto list_of = [](const nlohmann::json& v, const auto& is) {
      if (!v.is_array() || v.size() < 2) return false;
      for (const nlohmann::json& x : v)
        if (!is(x)) return false;
      return true;
    };
    auto is_path = [](const nlohmann::json& x) { return x.is_string(); };
    auto is_count = [](const nlohmann::json& x) { return x.is_number_integer(); };
    const bool one = (!j.contains("eval_data") || is_path(j["eval_data"])) &&
                     (!j.contains("eval_windows") || is_count(j["eval_windows"]));
    const bool several = j.contains("eval_data") && j.contains("eval_windows") && list_of(j["eval_data"], is_path) &&
                         list_of(j["eval_windows"], is_count) && j["eval_data"].size() == j["eval_windows"].size();
    OOMB_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer() && j.contains("eval_loss") &&
                   j["eval_loss"].is_number() && (one || several),
               "--save-best: {} is not oomb's record of a best model (step, eval_loss, eval_data, eval_windows); "
               "remove it or choose another "
               "directory", record.string());
    const bool same_windows = j.value("eval_data", eval_data) == eval_data &&
                              j.value("eval_windows", eval_windows) == eval_windows;
    if (j["step"].get<int64_t>() <= start_step && same_windows) {
      best = j["eval_loss"].get<double>();
    } else {
      std::cout << fmt::format("--save-best: {} is {}; the best is looked for afresh", record.string(),
                               same_windows ? fmt::format("of step {}, after the checkpoint resumed from",
                                                          j["step"].get<int64_t>())
                                            : std::string("of other held-out windows"))
                << std::endl;
    }
  }
  const auto inner = hooks.after_step;
  hooks.after_step = [=, &dist, &last](int64_t done, Optimizer& opt) mutable {
    double better = dist.leader() && last.evaluated && last.eval_loss < best ? 1.0 : 0.0;
    if (dist.size() > 1) dist.world().all_reduce_max(&better, 1);
    if (better > 0) {
      opt.finish();  // (an update beside the next step: done)
      best = last.eval_loss;
      const nlohmann::json j = {{"step", done},           {"eval_loss", last.eval_loss},
                                {"eval_targets", last.eval_targets}, {"eval_data", eval_data},
                                {"eval_windows", eval_windows}};
      save(dir, {{"oomb_best.json", j.dump(2) + "\n"}});
      std::cout << fmt::format("the lowest held-out loss so far ({:.4f}, after step {}): saved {}", last.eval_loss,
                               done, dir)
                << std::endl;
    }
    return inner ? inner(done, opt) : false;
  };
}

}  // namespace oomb::cli
