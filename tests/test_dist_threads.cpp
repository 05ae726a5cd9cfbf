// The ranks on one host share its cores (dist/rank_threads.h): without OMP_NUM_THREADS each rank's
// OpenMP team is the smaller of its own CPUs and the host's online CPUs over the ranks there, so
// that ranks do not each run a team over every core; OMP_NUM_THREADS is left as it says.
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

// The team by how a launcher placed the ranks: unbound (every rank may run on every CPU), bound to
// cores of its own, bound to a socket that others share, more ranks than CPUs, one rank alone.
TEST(RankThreads, TeamIsTheSmallerOfItsCpusAndItsShareOfTheHost) {
  EXPECT_EQ(rank_team(16, 16, 1), 16);  // one rank: every CPU
  EXPECT_EQ(rank_team(16, 16, 4), 4);   // 4 unbound ranks: a quarter each
  EXPECT_EQ(rank_team(16, 16, 3), 5);   // (rounded down)
  EXPECT_EQ(rank_team(4, 16, 4), 4);    // --map-by slot:PE=4: its own 4
  EXPECT_EQ(rank_team(1, 16, 4), 1);    // bound to one core
  EXPECT_EQ(rank_team(8, 16, 4), 4);    // 2 sockets of 8, 2 ranks on each
  EXPECT_EQ(rank_team(16, 16, 32), 1);  // more ranks than CPUs: at least one thread
  EXPECT_EQ(rank_team(6, 16, 2), 6);    // bound to 6 of the 8 its share would give
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
// over OpenMP's team (--metrics' host_update.threads, the team OpenMP made): without
// OMP_NUM_THREADS each rank's team is rank_team of its CPUs, the host's and 2, and the banner says
// so; with OMP_NUM_THREADS=2 the team is 2 and nothing is said. The losses are the same either way.
TEST(Dist, RanksOnOneHostShareItsCores) {
  NEED_MPI();
  const auto dir = temp_dir("dist_threads");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string train = fmt::format("{} train --model {}/m --data {}/tokens.bin --seq-len 64 --chunk-size 32 "
                                        "--steps 2 --dp 2 --device sim --offload params --metrics ",
                                        oomb, dir.string(), dir.string());
  const int online = int(sysconf(_SC_NPROCESSORS_ONLN)), want = rank_team(cpus_here(), online, 2);
  // (mpirun_util gives every rank OMP_NUM_THREADS=1: `env -u` takes it away again)
  const CmdResult shared =
      mpirun_line("--bind-to none -np 2 env -u OMP_NUM_THREADS " + train + (dir / "shared.jsonl").string());
  ASSERT_EQ(shared.code, 0) << shared.out;
  EXPECT_THAT(shared.out, HasSubstr(fmt::format("2 ranks on this host: {} OpenMP thread{} each (of the {} CPUs it may "
                                                "run on, {} online", want, want == 1 ? "" : "s", cpus_here(), online)));
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
}
