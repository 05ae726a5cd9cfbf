#include "cli/offload_advice.h"

#include <fmt/format.h>

#include <utility>

#include "cli/sweep_flag.h"
#include "core/error.h"

namespace oomb::cli {

std::optional<MemoryPlan> plan_with_offload(ChunkPlan plan, bool kv, bool params, const std::string& sweep_flag,
                                            bool sweep_given, const ModelConfig& cfg, int64_t N,
                                            int64_t host_available, Tier backend_tier,
                                            const std::function<MemoryPlan(const ChunkPlan&)>& plan_for) {
  plan.offload_kv = kv, plan.offload_params = params;
  try {
    if (params) check_offload_params(cfg, plan);
    if (zero3(plan)) check_zero3(plan, backend_tier);
    set_sweep(sweep_flag, sweep_given, cfg, N, host_available, plan_for, plan);
    return plan_for(plan);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string offload_fits(bool kv, bool params, const Limit& host, const Limit& device,
                         const std::function<std::optional<MemoryPlan>(bool, bool)>& plan_of) {
  std::string out;
  for (const auto& [k, p] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    if (k == kv && p == params) continue;
    const std::optional<MemoryPlan> m = plan_of(k, p);
    if (!m) continue;
    if (!fits_within(*m, host, device)) continue;
    out += fmt::format("{}{} fits (device {}, host and pinned {})", out.empty() ? "" : "; ",
                       k && p ? "--offload kv,params" : k ? "--offload kv" : p ? "--offload params" : "no --offload",
                       format_bytes(m->total(Tier::Device)), format_bytes(m->total(Tier::Host) + m->total(Tier::Pinned)));
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
