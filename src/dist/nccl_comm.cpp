#include "dist/nccl_comm.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <exception>
#include <thread>

#include "core/error.h"

namespace oomb {

namespace {

// NCCL's entry points, resolved from libnccl.so.2 on first use (nccl.h gives their types only).
struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRankConfig) init_rank_config;
  decltype(&ncclCommSplit) split;
  decltype(&ncclCommGetAsyncError) async_error;
  decltype(&ncclCommAbort) abort;
  decltype(&ncclCommDestroy) destroy;
  decltype(&ncclGetErrorString) error_string;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclReduceScatter) reduce_scatter;
  decltype(&ncclBroadcast) broadcast;
  std::string missing;  // why it did not load ("" when it did)
};

template <typename F>
void bind(void* lib, F& f, const char* name, std::string& missing) {
  f = lib ? reinterpret_cast<F>(::dlsym(lib, name)) : nullptr;
  if (!f && missing.empty()) missing = fmt::format("libnccl.so.2 has no {}", name);
}

const Nccl& nccl() {
  static const Nccl n = [] {
    Nccl n{};
    void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) n.missing = fmt::format("cannot load libnccl.so.2 ({}); put NCCL's library on LD_LIBRARY_PATH", ::dlerror());
    bind(lib, n.get_unique_id, "ncclGetUniqueId", n.missing);
    bind(lib, n.init_rank_config, "ncclCommInitRankConfig", n.missing);
    bind(lib, n.split, "ncclCommSplit", n.missing);
    bind(lib, n.async_error, "ncclCommGetAsyncError", n.missing);
    bind(lib, n.abort, "ncclCommAbort", n.missing);
    bind(lib, n.destroy, "ncclCommDestroy", n.missing);
    bind(lib, n.error_string, "ncclGetErrorString", n.missing);
    bind(lib, n.group_start, "ncclGroupStart", n.missing);
    bind(lib, n.group_end, "ncclGroupEnd", n.missing);
    bind(lib, n.send, "ncclSend", n.missing);
    bind(lib, n.recv, "ncclRecv", n.missing);
    bind(lib, n.all_gather, "ncclAllGather", n.missing);
    bind(lib, n.all_reduce, "ncclAllReduce", n.missing);
    bind(lib, n.reduce_scatter, "ncclReduceScatter", n.missing);
    bind(lib, n.broadcast, "ncclBroadcast", n.missing);
    return n;
  }();
  OOMB_CHECK(n.missing.empty(), "nccl: {}", n.missing);
  return n;
}

using clock = std::chrono::steady_clock;

class NcclComm final : public Comm {
 public:
  // An initialised communicator (non-blocking mode) over boot's ranks.
  NcclComm(ncclComm_t c, std::unique_ptr<Comm> owned_boot, Comm& boot, cudaStream_t s, double timeout_s)
      : c_(c), owned_boot_(std::move(owned_boot)), boot_(boot), s_(s), timeout_(timeout_s) {
    cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
  }
  ~NcclComm() override {
    cudaEventDestroy(done_);
    // destroying waits for the other ranks (no timeout): while an error unwinds, abort instead
    if (c_ && !aborted_) std::uncaught_exceptions() > 0 ? nccl().abort(c_) : nccl().destroy(c_);
  }
  int rank() const override { return boot_.rank(); }
  int size() const override { return boot_.size(); }
  bool on_device() const override { return true; }
  std::string name() const override { return "nccl"; }

  void all_to_all(const void* send, void* recv, size_t bytes) override {
    const auto* s = static_cast<const char*>(send);
    auto* r = static_cast<char*>(recv);
    run("all_to_all", bytes * size_t(size()), [&] {
      check("all_to_all", nccl().group_start());
      for (int j = 0; j < size(); ++j) {
        check("all_to_all", nccl().send(s + size_t(j) * bytes, bytes, ncclChar, j, c_, s_));
        check("all_to_all", nccl().recv(r + size_t(j) * bytes, bytes, ncclChar, j, c_, s_));
      }
      return nccl().group_end();
    });
  }
  void all_gather(const void* send, void* recv, size_t bytes) override {
    run("all_gather", bytes, [&] { return nccl().all_gather(send, recv, bytes, ncclChar, c_, s_); });
  }
  void all_reduce_sum(float* data, size_t n) override {
    run("all_reduce_sum", n * 4, [&] { return nccl().all_reduce(data, data, n, ncclFloat32, ncclSum, c_, s_); });
  }
  void all_reduce_sum(double* data, size_t n) override {
    run("all_reduce_sum", n * 8, [&] { return nccl().all_reduce(data, data, n, ncclFloat64, ncclSum, c_, s_); });
  }
  void all_reduce_max(double* data, size_t n) override {
    run("all_reduce_max", n * 8, [&] { return nccl().all_reduce(data, data, n, ncclFloat64, ncclMax, c_, s_); });
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    run("reduce_scatter_sum", n * 4 * size_t(size()),
        [&] { return nccl().reduce_scatter(send, recv, n, ncclFloat32, ncclSum, c_, s_); });
  }
  void broadcast(void* data, size_t bytes, int root) override {
    run("broadcast", bytes, [&] { return nccl().broadcast(data, data, bytes, ncclChar, root, c_, s_); });
  }
  // The stream's work done here, then every rank's (over the MPI group).
  void barrier() override {
    wait("barrier", 0);
    boot_.barrier();
  }
  std::unique_ptr<Comm> split(int color, int key) override {
    std::unique_ptr<Comm> boot = boot_.split(color, key);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = nullptr;
    try {
      settle("split", nccl().split(c_, color, key, &c, &cfg));
      settle_comm("split", c);
    } catch (...) {  // the half-made communicator aborted too
      if (c) nccl().abort(c);
      throw;
    }
    Comm& b = *boot;
    return std::make_unique<NcclComm>(c, std::move(boot), b, s_, timeout_);
  }

  // Waits for a call NCCL is still starting (non-blocking mode answers ncclInProgress).
  void settle(const char* call, ncclResult_t r) {
    if (r == ncclInProgress) return settle_comm(call, c_);
    check(call, r);
  }
  // (c: this communicator, or a child being split from it, which the caller aborts on failure)
  void settle_comm(const char* call, ncclComm_t c) {
    const auto start = clock::now();
    ncclResult_t state = ncclInProgress;
    while (true) {
      check(call, nccl().async_error(c, &state));
      if (state != ncclInProgress) break;
      if (seconds_since(start) > timeout_) {
        if (c == c_) time_out(call, 0);
        fail("nccl {} on rank {} of {}: not finished after {} s (--dist-timeout): another rank died, stalls, or runs "
             "with other flags", call, rank(), size(), timeout_);
      }
      std::this_thread::yield();
    }
    if (state != ncclSuccess && c == c_) abort_on(call, state);
    check(call, state);
  }

 private:
  template <typename Issue>
  void run(const char* call, size_t bytes, Issue issue) {
    settle(call, issue());
    wait(call, bytes);
  }
  // The host waits for the stream's work so far, watching NCCL's error state and the clock.
  void wait(const char* call, size_t bytes) {
    cuda_ok(call, cudaEventRecord(done_, s_));
    const auto start = clock::now();
    while (true) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady)  // (a sticky error: any earlier kernel on the stream may have made it)
        fail("nccl {} on rank {} of {}: a CUDA error on the compute stream, from this call or earlier work: {} "
             "(OOMB_CUDA_SYNC=1 names the op that made it)", call, rank(), size(), cudaGetErrorString(e));
      ncclResult_t state = ncclSuccess;
      check(call, nccl().async_error(c_, &state));
      if (state != ncclSuccess && state != ncclInProgress) abort_on(call, state);
      if (seconds_since(start) > timeout_) time_out(call, bytes);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  static double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  }
  // An error NCCL reports for this communicator: its kernels may never finish, so it is aborted
  // (a later stream synchronisation or destroy would wait forever), then named.
  [[noreturn]] void abort_on(const char* call, ncclResult_t state) {
    nccl().abort(c_);
    aborted_ = true;
    fail("nccl {} on rank {} of {}: {} (the communicator is aborted)", call, rank(), size(),
         nccl().error_string(state));
  }
  [[noreturn]] void time_out(const char* call, size_t bytes) {
    nccl().abort(c_);
    aborted_ = true;
    fail("nccl {} ({} bytes) on rank {} of {}: not finished after {} s (--dist-timeout): another rank died, stalls, "
         "or runs with other flags", call, bytes, rank(), size(), timeout_);
  }
  void check(const char* call, ncclResult_t r) const {
    OOMB_CHECK(r == ncclSuccess || r == ncclInProgress, "nccl {} on rank {} of {}: {}", call, rank(), size(),
               nccl().error_string(r));
  }
  void cuda_ok(const char* call, cudaError_t e) const {
    OOMB_CHECK(e == cudaSuccess, "nccl {} on rank {} of {}: {}", call, rank(), size(), cudaGetErrorString(e));
  }

  ncclComm_t c_;
  std::unique_ptr<Comm> owned_boot_;
  Comm& boot_;
  cudaStream_t s_;
  double timeout_;
  cudaEvent_t done_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

bool nccl_built() { return true; }

std::string nccl_unavailable(int local_ranks) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) {
    cudaGetLastError();
    gpus = 0;
  }
  if (gpus < local_ranks)
    return fmt::format("NCCL needs a GPU per rank: {} ranks on this node, {} GPU(s) visible", local_ranks, gpus);
  try {
    nccl();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::unique_ptr<Comm> nccl_comm(Comm& boot, Backend& be, double timeout_s) {
  auto* s = static_cast<cudaStream_t>(be.native_stream(Stream::Compute));
  OOMB_CHECK(s != nullptr, "nccl: the {} backend has no CUDA stream (NCCL needs --device cuda)", be.name());
  const Nccl& n = nccl();
  ncclUniqueId id{};
  if (boot.rank() == 0) OOMB_CHECK(n.get_unique_id(&id) == ncclSuccess, "nccl: ncclGetUniqueId failed on rank 0");
  boot.broadcast(&id, sizeof id, 0);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // calls return at once; NcclComm polls them, so a dead rank times out
  ncclComm_t c = nullptr;
  const ncclResult_t r = n.init_rank_config(&c, boot.size(), id, boot.rank(), &cfg);
  auto comm = std::make_unique<NcclComm>(c, nullptr, boot, s, timeout_s);
  comm->settle("init", r);
  return comm;
}

}  // namespace oomb
