// The ranks of a run and their groups: world = dp x sp ranks, rank = dp_rank * sp + sp_rank.
// A sequence-parallel group (--sp) shares each sequence, its tokens split between the ranks; the
// data-parallel groups (--dp) take different sequences. One process alone is the single-rank case.
#pragma once
#include <memory>
#include <string>

#include "dist/comm.h"

namespace oomb {

struct DistOptions {
  int64_t sp = 1;            // --sp: ranks sharing a sequence (Ulysses)
  int64_t dp = 1;            // --dp: sequences in parallel (gradients averaged)
  int zero = 0;              // --zero 0..3: optimizer state (1), gradients (2), parameters (3) sharded over every rank
  double timeout_s = 300;    // --dist-timeout: seconds before a collective call gives up
};

// Checks the flags alone (sp, dp >= 1, zero in 0..3): errors name the flag.
void check_dist_options(const DistOptions& o);

class Dist {
 public:
  // One rank (no MPI).
  Dist();
  // The ranks mpirun started (MPI), or one rank when not launched by an MPI launcher; the world's
  // size must equal sp x dp.
  explicit Dist(const DistOptions& o);
  // Ranks over a given communicator (tests).
  Dist(const DistOptions& o, std::unique_ptr<Comm> world);
  ~Dist();

  const DistOptions& options() const { return o_; }
  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  bool leader() const { return rank() == 0; }  // prints, writes metrics and files
  int sp_rank() const { return int(rank() % o_.sp); }
  int dp_rank() const { return int(rank() / o_.sp); }
  Comm& world() { return *world_; }
  Comm& sp() { return *sp_; }
  Comm& dp() { return *dp_; }
  // Every rank runs with the same flags: `text` (the resolved flags, one per line) from each rank is
  // compared with rank 0's; a difference is an error on every rank naming the first line that differs.
  void check_same_flags(const std::string& text);

 private:
  void make_groups();
  DistOptions o_;
  std::unique_ptr<Comm> world_, sp_, dp_;
};

}  // namespace oomb
