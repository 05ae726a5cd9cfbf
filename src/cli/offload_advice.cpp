#include "cli/offload_advice.h"

#include <fmt/format.h>

#include <utility>

#include "cli/sweep_flag.h"
#include "core/error.h"

namespace oomb::cli {

Offloads offloads_of(const ChunkPlan& plan) { return {plan.offload_kv, plan.offload_params, plan.offload_attention}; }

std::string offload_name(const Offloads& o) {
  std::string names;
  for (const auto& [on, name] : {std::pair{o.kv, "kv"}, {o.params, "params"}, {o.attention, "attention"}})
    if (on) names += (names.empty() ? "" : ",") + std::string(name);
  return names.empty() ? "running without --offload" : "--offload " + names;
}

std::optional<MemoryPlan> plan_with_offload(ChunkPlan plan, const Offloads& o, const std::string& sweep_flag,
                                            bool sweep_given, const ModelConfig& cfg, int64_t N,
                                            int64_t host_available, Tier backend_tier,
                                            const std::function<MemoryPlan(const ChunkPlan&)>& plan_for) {
  plan.offload_kv = o.kv, plan.offload_params = o.params, plan.offload_attention = o.attention;
  try {
    if (o.params) check_offload_params(cfg, plan);
    if (zero3(plan)) check_zero3(plan, backend_tier);
    set_sweep(sweep_flag, sweep_given, cfg, N, host_available, plan_for, plan);
    return plan_for(plan);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string offload_fits(const Offloads& run, bool keeps, const Limit& host, const Limit& device,
                         const std::function<std::optional<MemoryPlan>(const Offloads&)>& plan_of) {
  std::string out;
  for (const bool att : {false, true}) {
    if (att && !keeps) break;
    for (const auto& [k, p] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
      const Offloads o{k, p, att};
      if (o == run) continue;
      const std::optional<MemoryPlan> m = plan_of(o);
      if (!m) continue;
      if (!fits_within(*m, host, device)) continue;
      out += fmt::format("{}{} fits (device {}, host and pinned {})", out.empty() ? "" : "; ", offload_name(o),
                         format_bytes(m->total(Tier::Device)),
                         format_bytes(m->total(Tier::Host) + m->total(Tier::Pinned)));
    }
  }
  return out;
}

bool fits_within(const MemoryPlan& m, const Limit& host, const Limit& device) {
  const int64_t dev = m.total(Tier::Device), hst = m.total(Tier::Host) + m.total(Tier::Pinned);
  return (device.bytes <= 0 || dev <= device.bytes) && (host.bytes <= 0 || hst <= host.bytes);
}

std::optional<MemoryPlan> keep_attention_fits(ChunkPlan plan, int64_t N, const Limit& host, const Limit& device,
                                              const std::function<MemoryPlan(const ChunkPlan&)>& plan_for,
                                              bool* offloaded) {
  plan.keep_attention = N;
  for (const bool off : {false, true}) {
    if (off && (!offloaded || plan.sweep != SweepOrder::Chunk)) break;
    plan.offload_attention = off;
    MemoryPlan m = plan_for(plan);
    if (!fits_within(m, host, device)) continue;
    if (offloaded) *offloaded = off;
    return m;
  }
  return std::nullopt;
}

}  // namespace oomb::cli
