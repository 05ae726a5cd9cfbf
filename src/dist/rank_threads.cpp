#include "dist/rank_threads.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <type_traits>
#include <fmt/format.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>


namespace oomb {

RankPlace this_place() {
  RankPlace p;
  cpu_set_t mask;
  const int n = int(std::min<size_t>(CPU_SETSIZE, 64 * p.cpus.size()));
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    for (int c = 0; c < n; ++c)
      if (CPU_ISSET(c, &mask)) p.add(c);
  } else {
    for (int c = 0; c < std::min<int>(n, int(sysconf(_SC_NPROCESSORS_ONLN))); ++c) p.add(c);
  }
  return p;
}

// The ranks on mine's host that may run on CPU c.
static int sharing(const std::vector<RankPlace>& places, const RankPlace& mine, int c) {
  int ranks = 0;
  for (const RankPlace& p : places) ranks += p.host == mine.host && p.has(c);
  return ranks;
}

int rank_team(const std::vector<RankPlace>& places, int me) {
  const RankPlace& mine = places.at(size_t(me));
  double share = 0;
  for (int c = 0; c < 64 * int(mine.cpus.size()); ++c)
    if (mine.has(c)) share += 1.0 / sharing(places, mine, c);
  return std::max(1, int(std::floor(share + 1e-9)));
}

// OMP_NUM_THREADS holds a team: a list of positive whole numbers, commas between, spaces around
// them allowed (libgomp ignores anything else, and so does this).
static bool env_team() {
  const char* p = std::getenv("OMP_NUM_THREADS");
  if (!p) return false;
  for (;;) {
    while (std::isspace(static_cast<unsigned char>(*p))) ++p;
    if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
    errno = 0;
    char* end = nullptr;
    const long n = std::strtol(p, &end, 10);
    if (n <= 0 || errno != 0) return false;
    p = end;
    while (std::isspace(static_cast<unsigned char>(*p))) ++p;
    if (*p == '\0') return true;
    if (*p++ != ',') return false;
  }
}

RankThreads share_cores(Comm& world) {
  const std::unique_ptr<Comm> host = world.split_host();  // (MPI_COMM_TYPE_SHARED: the ranks of this host)
  std::vector<RankPlace> places(size_t(host->size()));
  const RankPlace mine = this_place();
  static_assert(std::is_trivially_copyable_v<RankPlace> && sizeof(RankPlace) == 8 * 17, "RankPlace crosses as bytes");
  host->all_gather(&mine, places.data(), sizeof(RankPlace));
  RankThreads t;
  const int me = host->rank();
  for (int c = 0; c < 64 * int(mine.cpus.size()); ++c) {
    if (!mine.has(c)) continue;
    ++t.cpus;
    t.most_sharing = std::max(t.most_sharing, sharing(places, mine, c));
  }
  t.local_ranks = host->size();
  t.env = env_team();
  if (!t.env && t.most_sharing > 1) {
    omp_set_num_threads(rank_team(places, me));
    t.chosen = true;
  }
  t.threads = omp_get_max_threads();
  return t;
}

std::string describe(const RankThreads& t) {
  if (!t.chosen) return "";
  return fmt::format("{} ranks on this host: {} OpenMP thread{} on rank 0 (its {} CPU{}, shared by up to {} ranks; "
                     "OMP_NUM_THREADS sets them)",
                     t.local_ranks, t.threads, t.threads == 1 ? "" : "s", t.cpus, t.cpus == 1 ? "" : "s",
                     t.most_sharing);
}

}  // namespace oomb
