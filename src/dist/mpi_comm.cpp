#include "dist/mpi_comm.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace oomb {

namespace {
class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm c, double timeout_s, bool owned) : c_(c), timeout_(timeout_s), owned_(owned) {
    MPI_Comm_rank(c_, &rank_);
    MPI_Comm_size(c_, &size_);
  }
  ~MpiComm() override {
    if (owned_ && mpi_active()) MPI_Comm_free(&c_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_to_all(const void* send, void* recv, size_t bytes) override {
    MPI_Request r;
    MPI_Ialltoall(send, count(bytes, "all_to_all"), MPI_BYTE, recv, int(bytes), MPI_BYTE, c_, &r);
    wait(r, "all_to_all", bytes * size_t(size_));
  }
  void all_gather(const void* send, void* recv, size_t bytes) override {
    MPI_Request r;
    MPI_Iallgather(send, count(bytes, "all_gather"), MPI_BYTE, recv, int(bytes), MPI_BYTE, c_, &r);
    wait(r, "all_gather", bytes * size_t(size_));
  }
  void all_reduce_sum(float* data, size_t n) override { reduce(data, n, MPI_FLOAT, MPI_SUM, 4, "all_reduce"); }
  void all_reduce_sum(double* data, size_t n) override { reduce(data, n, MPI_DOUBLE, MPI_SUM, 8, "all_reduce"); }
  void all_reduce_max(double* data, size_t n) override { reduce(data, n, MPI_DOUBLE, MPI_MAX, 8, "all_reduce"); }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    MPI_Request r;
    MPI_Ireduce_scatter_block(send, recv, count(n, "reduce_scatter"), MPI_FLOAT, MPI_SUM, c_, &r);
    wait(r, "reduce_scatter", n * 4 * size_t(size_));
  }
  void broadcast(void* data, size_t bytes, int root) override {
    for (size_t at = 0; at < bytes; at += kPiece) {
      MPI_Request r;
      MPI_Ibcast(static_cast<char*>(data) + at, int(std::min(kPiece, bytes - at)), MPI_BYTE, root, c_, &r);
      wait(r, "broadcast", bytes);
    }
  }
  void barrier() override {
    MPI_Request r;
    MPI_Ibarrier(c_, &r);
    wait(r, "barrier", 0);
  }
  std::unique_ptr<Comm> split(int color, int key) override {
    MPI_Comm c;
    MPI_Comm_split(c_, color, key, &c);
    return std::make_unique<MpiComm>(c, timeout_, true);
  }
  std::unique_ptr<Comm> split_host() override {
    MPI_Comm c;
    MPI_Comm_split_type(c_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &c);
    return std::make_unique<MpiComm>(c, timeout_, true);
  }
  std::string name() const override { return "mpi"; }

 private:
  static constexpr size_t kPiece = size_t(1) << 30;
  // MPI counts are int: a block must fit one.
  static int count(size_t n, const char* call) {
    OOMB_CHECK(n <= size_t(INT_MAX), "mpi {}: a block of {} elements exceeds MPI's int count", call, n);
    return int(n);
  }
  void reduce(void* data, size_t n, MPI_Datatype t, MPI_Op op, size_t elem, const char* call) {
    const size_t piece = kPiece / elem;
    for (size_t at = 0; at < n; at += piece) {
      MPI_Request r;
      MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + at * elem, int(std::min(piece, n - at)), t, op, c_, &r);
      wait(r, call, n * elem);
    }
  }
  // Tests the request until it completes: spinning briefly, then sleeping between tests so that
  // ranks sharing cores leave them to the ranks that compute; after the timeout, an error.
  void wait(MPI_Request& r, const char* call, size_t bytes) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    for (int spins = 0;; ++spins) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (spins < 200) continue;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (std::chrono::duration<double>(clock::now() - start).count() > timeout_)
        fail("mpi {} ({} bytes) on rank {} of {}: not finished after {} s (--dist-timeout): another rank died, "
             "stalls, or runs with other flags", call, bytes, rank_, size_, timeout_);
    }
  }
  MPI_Comm c_;
  double timeout_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

bool g_initialised = false;
void finalise() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}
}  // namespace

bool mpi_built() { return true; }

bool mpi_active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

int mpi_rank() {
  int r = 0;
  if (mpi_active()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::unique_ptr<Comm> mpi_world(double timeout_s) {
  OOMB_CHECK(timeout_s > 0, "--dist-timeout: must be positive, got {}", timeout_s);
  if (!g_initialised) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit(finalise);
    g_initialised = true;
  }
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, timeout_s, false);
}

void mpi_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace oomb
