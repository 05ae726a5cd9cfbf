#include "cli/memory_report.h"

#include <fmt/format.h>

namespace oomb::cli {

namespace {
bool tier_used(const MemoryPlan& m, Tier t) { return m.total(t) > 0; }
}  // namespace

std::string plan_table(const MemoryPlan& m) {
  std::string s = fmt::format("  {:<12}", "");
  for (Tier t : kTiers)
    if (tier_used(m, t)) s += fmt::format(" {:>20}", tier_name(t));
  s += "\n";
  for (int i = 0; i < kNumTags; ++i) {
    const Tag tag = Tag(i);
    if (tag == Tag::IO) continue;
    s += fmt::format("  {:<12}", tag_name(tag));
    for (Tier t : kTiers)
      if (tier_used(m, t)) s += fmt::format(" {:>20}", fmt::format("{} B", m.get(t, tag)));
    s += "\n";
  }
  s += fmt::format("  {:<12}", "total");
  for (Tier t : kTiers)
    if (tier_used(m, t)) s += fmt::format(" {:>20}", format_bytes(m.total(t)));
  return s + "\n";
}

nlohmann::json plan_json(const MemoryPlan& m) {
  nlohmann::json j = nlohmann::json::object();
  for (Tier t : kTiers) {
    nlohmann::json r = nlohmann::json::object();
    for (int i = 0; i < kNumTags; ++i)
      if (Tag(i) != Tag::IO) r[std::string(tag_name(Tag(i)))] = m.get(t, Tag(i));
    r["total"] = m.total(t);
    j[std::string(tier_name(t))] = r;
  }
  j["total"] = m.total();
  return j;
}

void parse_offload(const std::string& list, ChunkPlan& plan) {
  size_t at = 0;
  while (at <= list.size() && !list.empty()) {
    const size_t comma = list.find(',', at);
    const std::string name = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (name == "kv")
      plan.offload_kv = true;
    else if (name == "params")
      fail("--offload params: parameters in host memory are not built yet (only kv)");
    else
      fail("--offload: '{}' is not one of kv", name);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
}

void check_fits(const MemoryPlan& m, int64_t capacity, int64_t N, const std::function<MemoryPlan(int64_t)>& plan_for) {
  if (capacity <= 0 || m.total(Tier::Device) <= capacity) return;
  int64_t biggest = 0;  // the device tag that takes most
  for (int i = 1; i < kNumTags; ++i)
    if (m.get(Tier::Device, Tag(i)) > m.get(Tier::Device, Tag(biggest))) biggest = i;
  int64_t lo = 0, hi = N;  // the longest sequence that fits, by the same planner
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (plan_for(mid).total(Tier::Device) <= capacity ? lo : hi) = mid;
  }
  fail("--device-memory {}: the plan needs {} of device memory at N = {} ({} the most: {}); {}", capacity,
       format_bytes(m.total(Tier::Device)), N, tag_name(Tag(biggest)),
       format_bytes(m.get(Tier::Device, Tag(biggest))),
       lo > 0 ? fmt::format("at most N = {} fits (see oomb plan)", lo) : "no length fits (see oomb plan)");
}

}  // namespace oomb::cli
