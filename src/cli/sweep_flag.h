// --sweep, shared by oomb train and oomb plan: the order of a training step's work
// (model/sweep_plan.h): chunk, layer, or auto (the order that moves fewer bytes and whose plan
// fits the host's available memory).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "model/memory_plan.h"

namespace oomb::cli {

void add_sweep_flag(CLI::App* c, std::string& sweep);
// Sets plan.sweep from the flag for sequences of N tokens; plan_for(p) is the memory plan of p,
// host_available the host's bytes for auto's check. Not given, the flag is chunk, or auto with
// --offload params (the orders give the same bits, and with the parameters offloaded the layer
// order moves fewer bytes once a sequence has a few chunks; auto still takes the chunk order when
// it moves fewer or the layer order's arrays do not fit the host). Returns the line the plan and
// the train banner print: the order, and for auto why.
std::string set_sweep(const std::string& flag, bool given, const ModelConfig& cfg, int64_t N, int64_t host_available,
                      const std::function<MemoryPlan(const ChunkPlan&)>& plan_for, ChunkPlan& plan);

}  // namespace oomb::cli
