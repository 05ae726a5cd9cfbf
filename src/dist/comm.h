// Collective communication between the ranks of a run (design: shared/DESIGN.md; issue: many GPUs).
// A Comm is a group of ranks; every call is collective over the group, on host memory (or, where
// on_device(), on the backend's device memory: NCCL), and returns when this rank's part is done. An implementation runs on an existing engine: MPI (Open
// MPI) between processes; the single-rank group costs nothing. A call that does not finish within
// the group's timeout throws, naming the call, its size and the rank (a rank that died or stalls,
// or ranks that disagree on their flags, never hang a run).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace oomb {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // send: size() blocks of `bytes` (block j goes to rank j); recv: size() blocks (block i from rank i).
  virtual void all_to_all(const void* send, void* recv, size_t bytes) = 0;
  // recv: size() blocks of `bytes`, block i = rank i's send.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
  // data (n) := the sum over ranks, in place (the same bits on every rank).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  virtual void all_reduce_max(double* data, size_t n) = 0;
  // send: size() blocks of n floats; recv (n) := the sum over ranks of their block rank().
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t n) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // The ranks with the same color, ordered by key (MPI_Comm_split).
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;
  // The ranks that share this one's memory (its host; MPI_Comm_split_type's MPI_COMM_TYPE_SHARED),
  // in rank order: all of them where the group cannot tell.
  virtual std::unique_ptr<Comm> split_host() { return split(0, rank()); }
  virtual std::string name() const = 0;  // "mpi", "single", "nccl"
  // The calls take device memory, ordered after the work on the backend's compute stream (NCCL).
  virtual bool on_device() const { return false; }
};

// One rank alone: every collective is a copy or nothing.
std::unique_ptr<Comm> make_single_comm();

}  // namespace oomb
