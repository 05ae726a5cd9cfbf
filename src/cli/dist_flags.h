// The flags of many ranks (--sp, --dp, --zero, --dist-timeout), shared by oomb train and oomb plan.
#pragma once
#include <CLI/CLI.hpp>

#include "dist/dist.h"
#include "model/memory_plan.h"

namespace oomb::cli {

// with_timeout: --dist-timeout too (train; a plan has no collectives).
void add_dist_flags(CLI::App* c, DistOptions& o, bool with_timeout);
// The plan of rank `rank` of a run laid out by o.
void set_dist(const DistOptions& o, int64_t rank, ChunkPlan& plan);
// --comm nccl moves GPU memory: refused with another --device, whatever the ranks.
void check_comm_device(const DistOptions& o, const std::string& device);

}  // namespace oomb::cli
