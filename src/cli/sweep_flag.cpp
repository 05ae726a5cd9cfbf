#include "cli/sweep_flag.h"

#include <fmt/format.h>

#include "model/sweep_plan.h"

namespace oomb::cli {

void add_sweep_flag(CLI::App* c, std::string& sweep) {
  c->add_option("--sweep", sweep, "Order of a training step: chunk (each chunk through every layer), layer (each "
                "layer over every chunk, its outputs kept in host memory: each layer's weights cross once per pass "
                "with --offload params), or auto (the one that moves fewer bytes and fits the host); the same bits. "
                "Default: chunk, or auto with --offload params")
      ->check(CLI::IsMember({"chunk", "layer", "auto"}));
}

std::string set_sweep(const std::string& given_flag, bool given, const ModelConfig& cfg, int64_t N,
                      int64_t host_available, const std::function<MemoryPlan(const ChunkPlan&)>& plan_for,
                      ChunkPlan& plan) {
  const std::string flag = given ? given_flag : plan.offload_params ? "auto" : "chunk";
  plan_for(plan);  // the plan's bounds first: a size that would overflow is refused, naming the flag
  const SweepChoice s = sweep_traffic(cfg, plan, N);
  auto moved = [](const SweepTraffic& t) { return (t.kv_exact ? "" : "at most ") + format_bytes(t.total()); };
  if (plan.offload_attention && flag == "auto") {  // (the layer order keeps its outputs on the device)
    plan.sweep = SweepOrder::Chunk;
    return "sweep chunk (--sweep auto with --offload attention takes the chunk order, the one that offloads them)";
  }
  if (zero3(plan)) {  // (the byte counts below do not model --zero 3's collectives: auto is not decided by them)
    plan.sweep = flag == "layer" ? SweepOrder::Layer : SweepOrder::Chunk;
    if (flag == "layer")
      return "sweep layer (--zero 3: each layer gathered once per pass, its gradients reduce-scattered chunk by chunk)";
    return fmt::format("sweep chunk{}", flag == "auto" ? " (--sweep auto with --zero 3 takes the chunk order; "
                       "--sweep layer gathers each layer once per pass)" : "");
  }
  if (flag != "auto") {
    OOMB_CHECK(flag == "chunk" || flag == "layer", "--sweep: '{}' is not one of chunk, layer, auto", flag);
    plan.sweep = flag == "layer" ? SweepOrder::Layer : SweepOrder::Chunk;
    return fmt::format("sweep {}: {} moved per sequence between host and device (the {} order: {})", flag,
                       moved(plan.sweep == SweepOrder::Layer ? s.layer : s.chunk),
                       plan.sweep == SweepOrder::Layer ? "chunk" : "layer",
                       moved(plan.sweep == SweepOrder::Layer ? s.chunk : s.layer));
  }
  ChunkPlan layer = plan;
  layer.sweep = SweepOrder::Layer;
  const MemoryPlan m = plan_for(layer);
  const int64_t host = m.total(Tier::Host) + m.total(Tier::Pinned);
  const bool fits = host <= host_available;
  plan.sweep = choose_sweep(s, fits);
  return fmt::format("sweep auto -> {}: per sequence the chunk order moves {}, the layer order {} (its host memory "
                     "{}, {} the {} available)",
                     sweep_name(plan.sweep), moved(s.chunk), moved(s.layer), format_bytes(host),
                     fits ? "within" : "beyond", format_bytes(host_available));
}

}  // namespace oomb::cli
