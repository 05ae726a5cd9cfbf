// The simulated device (--device sim): the CPU kernels run on memory accounted in tier device,
// and asynchronous copies run on a copy-engine thread with its own queue, ordered like a CUDA
// stream. The compute stream is the calling thread, so its work is done when it is issued; a
// compute-stream wait on a copy event is a host wait for the copy engine. An injected delay before
// every asynchronous copy (OOMB_SIM_COPY_DELAY_US) makes a missing wait read or overwrite memory
// too early, giving a wrong answer rather than passing by luck. All offload logic is tested here.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "backend/cpu/cpu_backend.h"

namespace oomb {

namespace {

void* sim_alloc(size_t bytes) { return zeroed_host_alloc(bytes, "simulated device memory"); }
void sim_free(void* p) { std::free(p); }

// Work items run in order on one thread; item k (from 1) is done once done_ >= k.
class CopyEngine {
 public:
  explicit CopyEngine(int64_t delay_us) : delay_us_(delay_us), th_([this] { run(); }) {}
  ~CopyEngine() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    th_.join();
  }
  void push(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(fn));
      ++issued_;
    }
    cv_.notify_all();
  }
  uint64_t issued() {
    std::lock_guard<std::mutex> l(mu_);
    return issued_;
  }
  // The host waits for items 1..seq; an item's failure surfaces here.
  void wait_for(uint64_t seq) {
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return done_ >= seq || error_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        fn = std::move(q_.front());
        q_.pop_front();
      }
      if (delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
      std::exception_ptr err;
      try {
        fn();
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        ++done_;
        if (err && !error_) error_ = err;
      }
      done_cv_.notify_all();
    }
  }

  const int64_t delay_us_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> q_;
  uint64_t issued_ = 0, done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread th_;  // last: starts after the members it uses
};

struct SimEvent final : Event {
  uint64_t seq = 0;  // copy-engine items that must be done; 0: complete (compute-stream work)
};

const SimEvent& sim_event(const Event& e) {
  const auto* s = dynamic_cast<const SimEvent*>(&e);
  OOMB_CHECK(s != nullptr, "sim: an event made by another backend");
  return *s;
}

int64_t delay_from_env() {
  const char* v = std::getenv("OOMB_SIM_COPY_DELAY_US");
  return v ? std::strtoll(v, nullptr, 10) : 0;
}

class SimBackend final : public CpuBackend {
 public:
  SimBackend(int64_t capacity, int64_t delay_us) : CpuBackend(Tier::Device), engine_(delay_us) {
    Accountant::global().set_capacity(Tier::Device, capacity, "--device-memory");
  }
  ~SimBackend() override {
    engine_.wait_for(engine_.issued());
    Accountant::global().set_capacity(Tier::Device, 0, "");
  }
  std::string_view name() const override { return "sim"; }

  void copy_async(void* dst, Tier dt, const void* src, Tier st, size_t bytes, Stream s) override {
    OOMB_CHECK(host_addressable(dt) && host_addressable(st), "copy_async: the simulated device has no such memory");
    if (bytes == 0 || dst == src) return;
    if (s == Stream::Compute) {
      std::memcpy(dst, src, bytes);
      return;
    }
    engine_.push([=] { std::memcpy(dst, src, bytes); });
  }
  void fill_zero_async(void* dst, size_t bytes, Stream s) override {
    if (bytes == 0) return;
    if (s == Stream::Compute) {
      std::memset(dst, 0, bytes);
      return;
    }
    engine_.push([=] { std::memset(dst, 0, bytes); });
  }
  std::unique_ptr<Event> new_event() override { return std::make_unique<SimEvent>(); }
  void record(Event& e, Stream s) override {
    auto& ev = const_cast<SimEvent&>(sim_event(e));
    ev.seq = s == Stream::Copy ? engine_.issued() : 0;
  }
  // The copy stream runs in order and compute work is done when issued, so only a compute-stream
  // wait on copy work has anything to wait for: the host thread waits.
  void wait(Stream s, const Event& e) override {
    if (s == Stream::Compute) engine_.wait_for(sim_event(e).seq);
  }
  void synchronize(const Event& e) override {
    ++waits_.event_waits;
    engine_.wait_for(sim_event(e).seq);
  }
  // the sum of the device's values comes back to the host (the gradient norm): on a GPU, a drain
  double do_sum_squares(const Tensor& x) override {
    if (x.tier == Tier::Device && x.numel() > 0) ++waits_.drains;  // (CUDA returns 0 at once)
    return CpuBackend::do_sum_squares(x);
  }
  void synchronize() override {
    ++waits_.drains;
    engine_.wait_for(engine_.issued());
  }
  // a copy between the device's memory and the host's returns once done: on a GPU, a drain
  void copy(void* dst, Tier dt, const void* src, Tier st, size_t bytes) override {
    if (bytes > 0 && dst != src && (dt == Tier::Device) != (st == Tier::Device)) ++waits_.drains;
    CpuBackend::copy(dst, dt, src, st, bytes);
  }
  void copy_rows(void* dst, size_t dpitch, Tier dt, const void* src, size_t spitch, Tier st, size_t width,
                 size_t rows) override {
    if (rows > 0 && width > 0 && (dt == Tier::Device) != (st == Tier::Device)) ++waits_.drains;  // one, not one a row
    for (size_t i = 0; i < rows; ++i)
      CpuBackend::copy(static_cast<char*>(dst) + i * dpitch, dt, static_cast<const char*>(src) + i * spitch, st, width);
  }
  HostWaits host_waits() const override { return waits_; }

 private:
  CopyEngine engine_;
  HostWaits waits_{0, 0};
};

}  // namespace

std::unique_ptr<Backend> make_sim_backend(int64_t capacity, int64_t copy_delay_us) {
  OOMB_CHECK(capacity >= 0, "--device-memory: must not be negative, got {}", capacity);
  set_device_allocator(DeviceAllocator{&sim_alloc, &sim_free});
  set_device_memory_is_host(true);
  return std::make_unique<SimBackend>(capacity, copy_delay_us >= 0 ? copy_delay_us : delay_from_env());
}

}  // namespace oomb
