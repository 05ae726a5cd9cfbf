// The ranks on one host share its CPUs (dist/rank_threads.h): without OMP_NUM_THREADS each rank's
// OpenMP team is, over the CPUs it may run on, the sum of its shares among the ranks on its host
// that may run there, so that ranks do not each run a team over the same CPUs; a rank with CPUs of
// its own keeps them, and OMP_NUM_THREADS is left as it says.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include "dist/mpirun_util.h"
#include "dist/rank_threads.h"
#include "metrics_plan.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {
// A rank on `host` that may run on CPUs [from, to).
RankPlace place(uint64_t host, int from, int to) {
  RankPlace p;
  p.host = host;
  for (int c = from; c < to; ++c) p.add(c);
  return p;
}
}  // namespace

// The team by how a launcher placed the ranks: one rank alone; unbound (every rank on every CPU);
// bound to CPUs of its own; several bound to one socket, unevenly (Open MPI's bind-to socket for 3
// ranks on 2 sockets); a container's cpuset that every rank inherits on a larger host; more ranks
// than CPUs; ranks on another host not counted; partly overlapping masks.
TEST(RankThreads, TeamIsItsShareOfEachCpuItMayRunOn) {
  EXPECT_EQ(rank_team({place(1, 0, 16)}, 0), 16);
  const std::vector<RankPlace> unbound(4, place(1, 0, 16));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(rank_team(unbound, r), 4);
  const std::vector<RankPlace> own = {place(1, 0, 4), place(1, 4, 8), place(1, 8, 12), place(1, 12, 16)};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(rank_team(own, r), 4);
  const std::vector<RankPlace> sockets = {place(1, 0, 8), place(1, 8, 16), place(1, 0, 8)};
  EXPECT_EQ(rank_team(sockets, 0), 4);
  EXPECT_EQ(rank_team(sockets, 1), 8);
  EXPECT_EQ(rank_team(sockets, 2), 4);
  const std::vector<RankPlace> container(4, place(1, 16, 24));  // 8 CPUs of a 64-CPU host
  EXPECT_EQ(rank_team(container, 3), 2);
  const std::vector<RankPlace> crowded(32, place(1, 0, 16));
  EXPECT_EQ(rank_team(crowded, 31), 1);
  const std::vector<RankPlace> two_hosts = {place(1, 0, 16), place(2, 0, 16), place(1, 0, 16), place(2, 0, 16)};
  EXPECT_EQ(rank_team(two_hosts, 0), 8);
  EXPECT_EQ(rank_team(two_hosts, 3), 8);
  const std::vector<RankPlace> overlap = {place(1, 0, 6), place(1, 4, 10)};  // CPUs 4, 5 shared
  EXPECT_EQ(rank_team(overlap, 0), 5);
  EXPECT_EQ(rank_team(overlap, 1), 5);
}

namespace {
// The CPUs this process may run on (the ranks mpirun starts with --bind-to none inherit the
// test's mask).
int cpus_here() {
  cpu_set_t mask;
  return sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : int(sysconf(_SC_NPROCESSORS_ONLN));
}
}  // namespace

// Two ranks of --dp 2 with --offload params on the simulated device, whose update runs on the host
// over the team (--metrics' host_update.threads): unbound, without OMP_NUM_THREADS, each rank takes
// half of the CPUs they share, and the banner says so; with OMP_NUM_THREADS=2 the team is 2 and
// nothing is said; --update-threads 1 makes it 1; each bound to a core of its own (where there are
// two), each keeps its one and nothing is said. The losses are the same every way.
TEST(Dist, RanksOnOneHostShareItsCpus) {
  NEED_MPI();
  const auto dir = temp_dir("dist_threads");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string train = fmt::format("{} train --model {}/m --data {}/tokens.bin --seq-len 64 --chunk-size 32 "
                                        "--steps 2 --dp 2 --device sim --offload params --metrics ",
                                        oomb, dir.string(), dir.string());
  const int cpus = cpus_here(), want = std::max(1, cpus / 2);
  // (mpirun_util gives every rank OMP_NUM_THREADS=1: `env -u` takes it away again)
  const CmdResult shared =
      mpirun_line("--bind-to none -np 2 env -u OMP_NUM_THREADS " + train + (dir / "shared.jsonl").string());
  ASSERT_EQ(shared.code, 0) << shared.out;
  EXPECT_THAT(shared.out, HasSubstr(fmt::format("2 ranks on this host: {} OpenMP thread{} on rank 0 (its {} CPU{}, "
                                                "shared by up to 2 ranks", want, want == 1 ? "" : "s", cpus,
                                                cpus == 1 ? "" : "s")));
  const CmdResult two = mpirun_line("--bind-to none -np 2 env OMP_NUM_THREADS=2 " + train + (dir / "two.jsonl").string());
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_THAT(two.out, ::testing::Not(HasSubstr("ranks on this host")));
  const std::vector<nlohmann::json> s = metrics_lines(dir / "shared.jsonl"), t = metrics_lines(dir / "two.jsonl");
  ASSERT_EQ(s.size(), 2u);
  ASSERT_EQ(t.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(s[k]["host_update"]["threads"], want);
    EXPECT_EQ(t[k]["host_update"]["threads"], 2);
    EXPECT_EQ(s[k]["loss"], t[k]["loss"]);
  }
  // --update-threads: the update's team on every rank too (the update within the step: several ranks)
  const CmdResult one = mpirun_line("--bind-to none -np 2 env OMP_NUM_THREADS=2 " + train +
                                    (dir / "one.jsonl").string() + " --update-threads 1");
  ASSERT_EQ(one.code, 0) << one.out;
  const std::vector<nlohmann::json> u = metrics_lines(dir / "one.jsonl");
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[1]["host_update"]["threads"], 1);
  EXPECT_EQ(u[1]["loss"], s[1]["loss"]);
  if (cpus < 2) GTEST_SKIP() << "one CPU here: no two ranks can be bound to cores of their own";
  // (a hardware thread each: --bind-to core would give each every thread of its core)
  const CmdResult own =
      mpirun_line("--bind-to hwthread -np 2 env -u OMP_NUM_THREADS " + train + (dir / "own.jsonl").string());
  ASSERT_EQ(own.code, 0) << own.out;
  EXPECT_THAT(own.out, ::testing::Not(HasSubstr("ranks on this host")));
  const std::vector<nlohmann::json> o = metrics_lines(dir / "own.jsonl");
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[1]["host_update"]["threads"], 1);
  EXPECT_EQ(o[1]["loss"], s[1]["loss"]);
}
