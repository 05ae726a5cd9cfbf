// The ranks of a run and their groups: world = dp x sp ranks, rank = dp_rank * sp + sp_rank.
// A sequence-parallel group (--sp) shares each sequence, its tokens split between the ranks; the
// data-parallel groups (--dp) take different sequences. One process alone is the single-rank case.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "dist/comm.h"
#include "dist/rank_threads.h"

namespace oomb {

struct DistOptions {
  int64_t sp = 1;            // --sp: ranks sharing a sequence (Ulysses)
  int64_t head_chunks = 1;   // --sp-head-chunks: attention over each rank's heads in this many groups
  int64_t dp = 1;            // --dp: sequences in parallel (gradients averaged)
  int zero = 0;              // --zero 0..3: optimizer state (1), gradients (2), parameters (3) sharded over every rank
  double timeout_s = 300;    // --dist-timeout: seconds before a collective call gives up
  std::string comm = "auto"; // --comm auto|mpi|nccl: what the tensors cross ranks over
};

// Checks the flags alone (sp, dp >= 1, zero in 0..3, comm): errors name the flag.
void check_dist_options(const DistOptions& o);
// This process among the ranks on its node, from the launcher's environment (Open MPI, MPICH,
// Slurm); 0 and 1 without one. Once a launched Dist exists, local_ranks is the size of MPI's
// shared-memory group of this rank (share_cores), whatever the launcher set.
int local_rank();
int local_ranks();

class Dist {
 public:
  // One rank (no MPI).
  Dist();
  // The ranks mpirun started (MPI), or one rank when not launched by an MPI launcher; the world's
  // size must equal sp x dp. Launched, the ranks on a host share its CPUs (share_cores).
  explicit Dist(const DistOptions& o);
  // Ranks over a given communicator (tests).
  Dist(const DistOptions& o, std::unique_ptr<Comm> world);
  ~Dist();

  const DistOptions& options() const { return o_; }
  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  bool leader() const { return rank() == 0; }  // prints, writes metrics and files
  const RankThreads& threads() const { return threads_; }  // this rank's OpenMP team, as share_cores chose it
  int sp_rank() const { return int(rank() % o_.sp); }
  int dp_rank() const { return int(rank() / o_.sp); }
  Comm& world() { return *world_; }
  Comm& sp() { return *sp_; }
  Comm& dp() { return *dp_; }
  // Once the backend exists: the groups the tensors (Ulysses' exchanges, gradients, shards) cross
  // ranks over. With --comm nccl, or auto on CUDA where NCCL is built and loads and every rank on a
  // node has its own GPU: NCCL groups on device memory; otherwise the MPI groups (host staging).
  // Every rank decides the same: one rank unable makes auto fall back everywhere, and nccl fail
  // everywhere naming why.
  void attach(Backend& be);
  // The tensors over `world`, a group on device memory: attach's NCCL group, or in tests MPI's
  // presented as one on --device sim (whose device memory the host can read).
  void use_device_comm(std::unique_ptr<Comm> world);
  Comm& tensor_world() { return dev_world_ ? *dev_world_ : *world_; }
  Comm& tensor_sp() { return dev_sp_ ? *dev_sp_ : *sp_; }
  bool device_comm() const { return dev_world_ != nullptr; }
  // The world group for buffers in tier t: the tensors' group for device memory, MPI's for the
  // host's (NCCL reads device memory only: pinned gradients under --offload params cross over MPI).
  Comm& group_for(Tier t) { return t == Tier::Device ? tensor_world() : world(); }
  // Every rank runs with the same flags: `text` (the resolved flags, one per line) from each rank is
  // compared with rank 0's; a difference is an error on every rank naming the first line that differs.
  void check_same_flags(const std::string& text);

 private:
  void make_groups();
  DistOptions o_;
  std::unique_ptr<Comm> world_, sp_, dp_;
  std::unique_ptr<Comm> dev_world_, dev_sp_;  // NCCL (attach)
  RankThreads threads_;
};

}  // namespace oomb
