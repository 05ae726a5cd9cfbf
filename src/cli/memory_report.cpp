#include "cli/memory_report.h"

#include <algorithm>
#include <fmt/format.h>

#include "cli/commands.h"

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
      r[std::string(tag_name(Tag(i)))] = m.get(t, Tag(i));
    r["total"] = m.total(t);
    j[std::string(tier_name(t))] = r;
  }
  j["total"] = m.total();
  return j;
}

CLI::Validator offload_list() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::vector<std::string> seen;
        for (size_t at = 0;;) {
          const size_t comma = s.find(',', at);
          const std::string name = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
          if (name != "kv" && name != "params" && name != "attention")
            return "'" + name + "' is not one of kv, params, attention (comma-separated: kv,params)";
          if (std::find(seen.begin(), seen.end(), name) != seen.end()) return "'" + name + "' given twice";
          seen.push_back(name);
          if (comma == std::string::npos) return {};
          at = comma + 1;
        }
      },
      "kv,params,attention");
}

void set_offload(const std::string& list, int64_t group, int64_t N, ChunkPlan& plan) {
  size_t at = 0;
  while (at <= list.size() && !list.empty()) {
    const size_t comma = list.find(',', at);
    const std::string name = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (name == "kv")
      plan.offload_kv = true;
    else if (name == "params")
      plan.offload_params = true;
    else if (name == "attention")
      plan.offload_attention = true;
    else
      fail("--offload: '{}' is not one of kv, params, attention", name);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  OOMB_CHECK(group == 0 || plan.offload_kv, "--offload-group: only with --offload kv");
  const int64_t layer_pages = N / plan.page_size + (N % plan.page_size != 0);
  OOMB_CHECK(group <= layer_pages, "--offload-group {}: larger than a layer's {} pages at N = {}", group, layer_pages, N);
  plan.offload_group = group;
}

void add_sparse_flags(CLI::App* c, SparseFlags& f) {
  c->add_option("--sparse-pages", f.pages, "Page-sparse attention: each query tile reads its own chunk and K earlier "
                "pages, the highest scoring against its queries (default: every page, dense)")->check(count());
  c->add_option("--sparse-tile", f.tile, "With --sparse-pages: query rows per choice (default 128, at most the chunk)")->check(count());
  c->add_option("--sink-pages", f.sinks, "With --sparse-pages: the first S pages, always read (default 1)")->check(count(true));
  c->add_flag("--sparse-shared", f.shared, "With --sparse-pages: one choice for every head (scores summed over heads, "
              "OOMB's way; default: one per kv head group)");
  c->add_option("--sparse-score", f.score, "With --sparse-pages: the page score: mean (q . the page's mean key, "
                "the default) or quest (Quest's upper bound from each page's per-dimension min and max keys)")
      ->check(CLI::IsMember({"mean", "quest"}));
}

void set_sparse(const SparseFlags& f, const ModelConfig& cfg, ChunkPlan& plan) {
  OOMB_CHECK(f.pages >= 0 || (f.tile == 128 && f.sinks == 1 && !f.shared && f.score == "mean"),
             "--sparse-tile, --sink-pages, --sparse-shared and --sparse-score: only with --sparse-pages");
  plan.sparse = sparse_options(f.pages, f.tile, f.sinks, f.shared, f.score, plan.chunk, cfg.kv_heads);
}

double device_bytes_per_token(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, const std::string& optimizer,
                              size_t workspace_bytes, Tier dev, size_t pinned_workspace_bytes) {
  ChunkPlan p2 = plan;
  if (p2.offload_kv && p2.offload_group == 0) p2.offload_group = KVCache::group_for(kv_cache_options(cfg, plan), N);
  auto at = [&](int64_t n) {  // (--keep-attention keeps the outputs of every token of a sequence of n)
    ChunkPlan p = p2;
    if (p.keep_attention > 0) p.keep_attention = n;
    return plan_memory(cfg, p, n, optimizer, workspace_bytes, dev, pinned_workspace_bytes).total(dev);
  };
  return double(at(2 * N) - at(N)) / double(N);
}

}  // namespace oomb::cli
