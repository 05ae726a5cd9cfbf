// What `oomb plan` prints: the plan by (tier, tag). (`oomb train`'s check of the plan against the
// machine's memory is in cli/guards.h.)
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "model/memory_plan.h"

namespace oomb::cli {

// A table: one row per tag, a column per tier in use, totals.
std::string plan_table(const MemoryPlan& m);
// {"device": {"weights": B, ..., "total": B}, "host": {...}, "pinned": {...}, "total": B}
nlohmann::json plan_json(const MemoryPlan& m);
// --offload's list ("kv", "params" or "kv,params") and --offload-group (0: the default) into the plan for
// sequences of N tokens; other names, a group without --offload kv, or a group larger than a
// layer's pages are errors naming the flag.
void set_offload(const std::string& list, int64_t group, int64_t N, ChunkPlan& plan);
}  // namespace oomb::cli
