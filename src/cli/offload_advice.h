// What another --offload setting, or --keep-attention, would need: the advice a run or a plan gets.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "cli/guards.h"
#include "model/memory_plan.h"

namespace oomb::cli {

// An --offload setting: which of kv, params and attention it names.
struct Offloads {
  bool kv = false, params = false, attention = false;
  bool operator==(const Offloads&) const = default;
};
Offloads offloads_of(const ChunkPlan& plan);
std::string offload_name(const Offloads& o);  // "--offload kv,params", "running without --offload"

// The run's plan with offload_kv, offload_params and offload_attention set as o says, its sweep resolved as the run's
// (set_sweep with the run's --sweep flag, whether given, and the host's bytes for auto); nothing
// where the run cannot take that setting (LoRA or --zero 3 refusing it). plan_for(p) is p's plan.
std::optional<MemoryPlan> plan_with_offload(ChunkPlan plan, const Offloads& o, const std::string& sweep_flag,
                                            bool sweep_given, const ModelConfig& cfg, int64_t N,
                                            int64_t host_available, Tier backend_tier,
                                            const std::function<MemoryPlan(const ChunkPlan&)>& plan_for);

// The --offload settings other than the run's own (none, kv, params, kv and params; each with
// attention too where the run keeps attention: `keeps`) whose plans fit both limits, each with its
// device and host needs ("--offload kv,params fits (device 7.9 GiB, host and pinned 71.0 GiB)"), or
// "" where none does. plan_of(o): the plan of that setting (plan_with_offload), or nothing.
std::string offload_fits(const Offloads& run, bool keeps, const Limit& host, const Limit& device,
                         const std::function<std::optional<MemoryPlan>(const Offloads& o)>& plan_of);

// Whether m fits within both limits (a limit of 0 bytes: none).
bool fits_within(const MemoryPlan& m, const Limit& host, const Limit& device);

// The run's plan with --keep-attention for its N tokens, where it fits both limits; nothing
// otherwise. plan_for(p) is p's plan. With `offloaded` (a run on a device, in the chunk order), where
// the store on the device does not fit, the plan with --offload attention too, and *offloaded says
// which of the two it is.
std::optional<MemoryPlan> keep_attention_fits(ChunkPlan plan, int64_t N, const Limit& host, const Limit& device,
                                              const std::function<MemoryPlan(const ChunkPlan&)>& plan_for,
                                              bool* offloaded = nullptr);

}  // namespace oomb::cli
