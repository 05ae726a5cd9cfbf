#include "dist/rank_threads.h"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

namespace oomb {

int rank_team(int cpus, int online, int local_ranks) {
  return std::max(1, std::min(cpus, online / std::max(1, local_ranks)));
}

RankThreads share_cores(int local_ranks) {
  RankThreads t;
  t.local_ranks = local_ranks;
  t.online = int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  cpu_set_t mask;
  t.cpus = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : t.online;
  const char* env = std::getenv("OMP_NUM_THREADS");
  t.env = env && *env;
  if (!t.env && local_ranks > 1) {
    omp_set_num_threads(rank_team(t.cpus, t.online, local_ranks));
    t.chosen = true;
  }
  t.threads = omp_get_max_threads();
  return t;
}

std::string describe(const RankThreads& t) {
  if (!t.chosen) return "";
  return fmt::format("{} ranks on this host: {} OpenMP thread{} each (of the {} CPUs it may run on, {} online; "
                     "OMP_NUM_THREADS sets them)",
                     t.local_ranks, t.threads, t.threads == 1 ? "" : "s", t.cpus, t.online);
}

}  // namespace oomb
