// Guards the commands run before they open anything for writing or start any work: outputs that
// would overwrite an input, output model directories holding another model, plans that do not fit
// the machine.
#pragma once
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "hf/config.h"
#include "model/memory_plan.h"

namespace oomb::cli {

struct NamedPath {
  std::string flag;  // "--data"
  std::string path;  // empty: not given (skipped)
  bool whole = false;  // a directory taken as a whole: every file of a --data directory is read, a model
                       // directory output is replaced as a unit
};

// Refuses any output that is, or resolves to (symlinks, "..", hard links), an input file or
// directory, that holds an input, or that lies inside an input directory taken as a whole. Two
// outputs must not be one path, nor one inside the other's directory taken as a whole.
void refuse_aliasing(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// Fails before any work when `flag` DIR cannot receive a model directory: DIR is not a directory,
// is a mount point (the save renames a new directory over it), the nearest existing ancestor is
// not writable, or, force off, DIR holds a model other than `cfg` (a different config.json) or the
// other kind of save than this one (adapter: a LoRA adapter is saved, else a whole model; the two
// kinds' files side by side, a loader that finds adapter_config.json loads the adapter's base and
// it, not the weights beside it). Creates nothing.
void check_model_out(const std::string& flag, const std::string& dir, const ModelConfig& cfg, bool force,
                     bool adapter = false);
// Removes what a killed save into `flag` DIR left beside it (staging directories of writers no longer
// running, a whole model's size each), saying so on `log`; a save would remove them only at its end.
void remove_stale_saves(const std::string& flag, const std::string& dir, std::ostream& log);

// Fails before any work when `flag` FILE cannot be written at the run's end: FILE is a directory, or
// its folder does not exist or is not writable. Creates nothing.
void check_file_out(const std::string& flag, const std::string& file);

// The memory the plan needs against what the machine has: host + pinned bytes against `host_limit`
// (MemAvailable), device bytes against `device_limit` (0: unknown, unchecked). Refuses, naming the
// tier, the tag that takes most, and the largest N (at this C) and C (at this N) that fit, unless
// force, which prints the same as a warning to `warn`. plan_for(N, C) is the plan at another shape.
struct Limit {
  int64_t bytes = 0;
  std::string what;  // "MemAvailable of /proc/meminfo", "--device-memory 1000000"
};
// One rank's share of the host's available memory (MemAvailable): the ranks on a node each hold
// their plan at once, so each is held to available / ranks_here.
Limit host_share(int64_t available, int ranks_here);
// offload, where given, is asked only on a refusal: what else would fit (cli/offload_advice.h), added to it.
void check_plan_fits(const MemoryPlan& m, int64_t N, int64_t C, const Limit& host, const Limit& device,
                     const std::function<MemoryPlan(int64_t N, int64_t C)>& plan_for, bool force,
                     std::ostream* warn, const std::function<std::string()>& offload = {});

// What the plan says fits within `bytes` of host + pinned (is_host) or device memory: the largest N
// at chunk C and the largest C at length N ("at most N = 4096 fits at C = 512; C = 128 fits at N = 8192").
std::string what_fits(int64_t N, int64_t C, bool is_host, int64_t bytes,
                      const std::function<MemoryPlan(int64_t N, int64_t C)>& plan_for);

// The advice an out-of-memory error gets (core/memory.h set_out_of_memory_advice) once a command
// knows its plan: what the run (N, C) needs in the tier that ran out, and what would fit within what
// the tier had (the device's capacity, or what the host held when it gave out). plan_for must stay
// valid while the command runs.
OutOfMemoryAdvice plan_advice(int64_t N, int64_t C, std::function<MemoryPlan(int64_t N, int64_t C)> plan_for);

}  // namespace oomb::cli
