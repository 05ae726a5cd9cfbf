// What `oomb plan` prints and `oomb train` checks before it starts: the plan by (tier, tag), and
// whether it fits a device's capacity.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "model/memory_plan.h"

namespace oomb::cli {

// A table: one row per tag, a column per tier in use, totals.
std::string plan_table(const MemoryPlan& m);
// {"device": {"weights": B, ..., "total": B}, "host": {...}, "pinned": {...}, "total": B}
nlohmann::json plan_json(const MemoryPlan& m);
// --offload's list ("kv", later "params"): sets plan.offload_kv; other names are errors.
void parse_offload(const std::string& list, ChunkPlan& plan);
// Fails, naming the tag that does not fit and the longest sequence that would, when the plan's
// device bytes exceed `capacity` (0: no limit). plan_for(N) is the plan at another length.
void check_fits(const MemoryPlan& m, int64_t capacity, int64_t N,
                const std::function<MemoryPlan(int64_t)>& plan_for);

}  // namespace oomb::cli
