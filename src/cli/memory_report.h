// What `oomb plan` prints: the plan by (tier, tag). (`oomb train`'s check of the plan against the
// machine's memory is in cli/guards.h.)
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "model/memory_plan.h"

namespace oomb::cli {

// A table: one row per tag, a column per tier in use, totals.
std::string plan_table(const MemoryPlan& m);
// {"device": {"weights": B, ..., "total": B}, "host": {...}, "pinned": {...}, "total": B}
nlohmann::json plan_json(const MemoryPlan& m);
// --offload's list (any of "kv", "params", "attention", comma-separated) and --offload-group (0: the default) into the plan for
// sequences of N tokens; other names, a group without --offload kv, or a group larger than a
// layer's pages are errors naming the flag.
void set_offload(const std::string& list, int64_t group, int64_t N, ChunkPlan& plan);
// --offload's check when the command line is read: each of kv, params and attention at most once.
CLI::Validator offload_list();

// Page-sparse attention's flags (oomb train and oomb plan): --sparse-pages, --sparse-tile,
// --sink-pages, --sparse-shared, --sparse-score.
struct SparseFlags {
  int64_t pages = -1, tile = 128, sinks = 1;  // pages -1: not given (dense)
  bool shared = false;
  std::string score = "mean";
};
void add_sparse_flags(CLI::App* c, SparseFlags& f);
// Into the plan (after its chunk size is set); bad values are errors naming the flag.
void set_sparse(const SparseFlags& f, const ModelConfig& cfg, ChunkPlan& plan);
// The device tier's growth per token: (device bytes at 2N - at N) / N, for `oomb plan`.
double device_bytes_per_token(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, const std::string& optimizer,
                              size_t workspace_bytes, Tier backend_tier, size_t pinned_workspace_bytes);
}  // namespace oomb::cli
