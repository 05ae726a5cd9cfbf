// The host's cores shared among the ranks a launcher started on it. OpenMP makes each process's
// team as large as the CPUs it may run on, so L ranks on one host, unbound (mpirun's
// --oversubscribe, --bind-to none) or bound to a socket each shares, would each run a team over the
// same cores: L times the threads there are cores for, each spinning at every barrier. Without
// OMP_NUM_THREADS each rank's team is therefore the smaller of its own CPUs (its affinity mask)
// and the host's online CPUs / L; a rank bound to cores of its own keeps them all.
#pragma once
#include <string>

namespace oomb {

struct RankThreads {
  int threads = 0;       // OpenMP's team now
  int cpus = 0;          // CPUs in this process's affinity mask
  int online = 0;        // the host's online CPUs
  int local_ranks = 1;   // ranks on this host (the launcher's environment)
  bool env = false;      // OMP_NUM_THREADS was set: left as it says
  bool chosen = false;   // the team was set here
};

// The team for a rank: max(1, min(cpus, online / local_ranks)).
int rank_team(int cpus, int online, int local_ranks);
// Sets OpenMP's team for this (the calling) thread, where several ranks share the host and
// OMP_NUM_THREADS is unset; the host's update thread under --offload params takes its team from the
// thread that starts it.
RankThreads share_cores(int local_ranks);
// "2 ranks on this host: 8 OpenMP threads each (...)", or "" where nothing was chosen.
std::string describe(const RankThreads& t);

}  // namespace oomb
