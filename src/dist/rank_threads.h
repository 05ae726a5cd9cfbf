// The host's CPUs shared among the ranks on it. OpenMP makes each process's team as large as the
// CPUs it may run on (its affinity mask), so ranks on one host whose masks overlap (mpirun's
// --bind-to none or --oversubscribe, a socket that several ranks are bound to, a container's or a
// job's cpuset that every rank inherits) would each run a team over the same CPUs, several threads
// to a CPU, each spinning at every barrier. Without OMP_NUM_THREADS the ranks of each host (MPI's
// shared-memory group) exchange their masks and each takes, of each CPU it may run on, its share
// among the host's ranks that may run there: its team is the sum of those shares (at least one
// thread). A rank bound to CPUs of its own keeps them all.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dist/comm.h"

namespace oomb {

// Where a rank runs: its host (ranks of one host share an id; share_cores gathers one host's) and
// its affinity mask (CPUs 0 .. 1023).
struct RankPlace {
  uint64_t host = 0;
  std::array<uint64_t, 16> cpus{};
  bool has(int cpu) const { return (cpus[size_t(cpu) / 64] >> (cpu % 64)) & 1; }
  void add(int cpu) { cpus[size_t(cpu) / 64] |= uint64_t(1) << (cpu % 64); }
};
// This process's place.
RankPlace this_place();

struct RankThreads {
  int threads = 0;      // OpenMP's team now
  int cpus = 0;         // CPUs in this rank's mask
  int local_ranks = 1;  // ranks on this host
  int most_sharing = 1; // the most ranks on this host that may run on one of its CPUs
  bool env = false;     // OMP_NUM_THREADS holds a team: left as it says
  bool chosen = false;  // the team was set here (a CPU of its mask is another rank's too)
};

// Rank `me`'s team among `places` (every rank's): the sum over its CPUs of 1 / the ranks on its
// host whose masks hold that CPU, rounded down, at least 1.
int rank_team(const std::vector<RankPlace>& places, int me);
// Every rank of `world` calls it (the host's group split off, one all-gather of its masks): sets this (the calling) thread's
// OpenMP team to rank_team where OMP_NUM_THREADS holds none and a CPU is shared. (A thread started
// later takes its team from OpenMP's default, not this setting: the optimizer hands its own over.)
RankThreads share_cores(Comm& world);
// "2 ranks on this host: 1 OpenMP thread on rank 0 (...)", or "" where nothing was chosen.
std::string describe(const RankThreads& t);

}  // namespace oomb
