#include "cli/save_best.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli/best_record.h"

namespace oomb::cli {

namespace {
// A held-out path (or a list of them) as its lexically normal text: e.bin and ./e.bin are one set.
nlohmann::json normal_paths(const nlohmann::json& v) {
  if (v.is_string()) return std::filesystem::path(v.get<std::string>()).lexically_normal().string();
  if (!v.is_array()) return v;
  nlohmann::json out = nlohmann::json::array();
  for (const nlohmann::json& x : v) out.push_back(normal_paths(x));
  return out;
}
}  // namespace

void add_save_best(const std::string& dir, const nlohmann::json& given_data, const nlohmann::json& eval_windows,
                   int64_t start_step, Dist& dist, const StepStats& last, TrainHooks& hooks, const SaveModel& save) {
  namespace fs = std::filesystem;
  const nlohmann::json eval_data = normal_paths(given_data);  // (as recorded and compared)
  double best = std::numeric_limits<double>::infinity();
  const fs::path record = fs::path(dir) / "oomb_best.json";
  if (dist.leader() && start_step > 0 && fs::exists(record)) {
    std::ifstream in(record);
    const BestRecord r = parse_best_record(std::string(std::istreambuf_iterator<char>(in), {}), record.string());
    const bool same_windows = (r.eval_data.is_null() || normal_paths(r.eval_data) == eval_data) &&
                              (r.eval_windows.is_null() || r.eval_windows == eval_windows);
    if (r.step <= start_step && same_windows) {
      best = r.eval_loss;
    } else {
      std::cout << fmt::format("--save-best: {} is {}; the best is looked for afresh", record.string(),
                               same_windows ? fmt::format("of step {}, after the checkpoint resumed from", r.step)
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
      save(dir, {{"oomb_best.json", best_record_text({done, last.eval_loss, last.eval_targets, eval_data, eval_windows})}});
      std::cout << fmt::format("the lowest held-out loss so far ({:.4f}, after step {}): saved {}", last.eval_loss,
                               done, dir)
                << std::endl;
    }
    return inner ? inner(done, opt) : false;
  };
}

}  // namespace oomb::cli
