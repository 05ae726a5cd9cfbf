// oomb train --save-best DIR: the model of the lowest held-out loss so far, with its record.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "dist/dist.h"
#include "hf/checkpoint.h"
#include "train/trainer.h"

namespace oomb::cli {

// Saves the run's model (as --out does) into a directory, with extra files, as one unit; every rank calls it.
using SaveModel = std::function<void(const std::string& dir, const ExtraFiles& extra)>;

// --save-best DIR: after each step whose held-out loss (last.evaluated) is the lowest so far, the update
// finished, save(DIR, {oomb_best.json}) before the step's checkpoint. Rank 0 decides for every rank (the
// save may gather shards). A resumed run starts from DIR's oomb_best.json where it is of a step its
// checkpoint has done (the run up to there is the same) and of the same held-out windows.
// eval_data, eval_windows: --eval-data's path and window count, or with several sets a list of each
// (paths recorded and compared as their lexically normal text: ./e.bin is e.bin).
void add_save_best(const std::string& dir, const nlohmann::json& eval_data, const nlohmann::json& eval_windows,
                   int64_t start_step, Dist& dist, const StepStats& last, TrainHooks& hooks, const SaveModel& save);

}  // namespace oomb::cli
