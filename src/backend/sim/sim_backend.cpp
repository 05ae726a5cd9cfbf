// The simulated device (--device sim): the CPU kernels run on memory accounted in tier device,
// and asynchronous copies run on two copy-engine threads (Stream::Copy, Stream::CopyOut), each with
// its own queue, ordered like a CUDA stream. The compute stream is the calling thread, so its work
// is done when it is issued; a compute-stream wait on a copy event is a host wait for that engine,
// and a copy stream's wait for the other's event an item in its queue that waits for the other
// engine. An injected delay before every asynchronous copy (OOMB_SIM_COPY_DELAY_US) makes a missing
// wait read or overwrite memory too early, giving a wrong answer rather than passing by luck; a delay
// of kHoldCopies (sim_hold.h) holds each copy until something waits for it or for a later one on its
// stream. All offload logic is tested here.
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
#include "backend/sim_hold.h"

namespace oomb {

namespace {

void* sim_alloc(size_t bytes) { return zeroed_host_alloc(bytes, "simulated device memory"); }
void sim_free(void* p) { std::free(p); }

// Work items run in order on one thread; item k (from 1) is done once done_ >= k. Held (a delay of
// kHoldCopies): item k runs only once something waited for it or a later one (requested_ >= k).
class CopyEngine {
 public:
  explicit CopyEngine(int64_t delay_us)
      : delay_us_(delay_us == kHoldCopies ? 0 : delay_us), hold_(delay_us == kHoldCopies), th_([this] { run(); }) {}
  ~CopyEngine() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    th_.join();
  }
  // delayed: the injected delay before it (a copy or a set; not a wait for the other engine)
  void push(std::function<void()> fn, bool delayed = true) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back({std::move(fn), delayed});
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
    request(seq);
    done_cv_.wait(l, [&] { return done_ >= seq || error_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  // The other engine's thread waits for items 1..seq; a failure stays here for the host to see.
  void reached(uint64_t seq) {
    std::unique_lock<std::mutex> l(mu_);
    request(seq);
    done_cv_.wait(l, [&] { return done_ >= seq || error_; });
  }

 private:
  void request(uint64_t seq) {  // (mu_ held)
    if (hold_ && seq > requested_) requested_ = seq, cv_.notify_all();
  }
  void run() {
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || (!q_.empty() && (!hold_ || done_ < requested_)); });
        if (q_.empty()) return;
        it = std::move(q_.front());
        q_.pop_front();
      }
      if (delay_us_ > 0 && it.delayed) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
      std::exception_ptr err;
      try {
        it.fn();
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
  const bool hold_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  struct Item {
    std::function<void()> fn;
    bool delayed = true;
  };
  std::deque<Item> q_;
  uint64_t issued_ = 0, done_ = 0, requested_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread th_;  // last: starts after the members it uses
};

struct SimEvent final : Event {
  int engine = 0;    // the copy engine it was recorded on (0: Stream::Copy, 1: Stream::CopyOut)
  uint64_t seq = 0;  // that engine's items that must be done; 0: complete (compute-stream work)
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
  SimBackend(int64_t capacity, int64_t delay_us, int64_t out_delay_us)
      : CpuBackend(Tier::Device), in_(delay_us), out_(out_delay_us) {
    Accountant::global().set_capacity(Tier::Device, capacity, "--device-memory");
  }
  ~SimBackend() override {
    drain_engines();
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
    engine(s).push([=] { std::memcpy(dst, src, bytes); });
  }
  void fill_zero_async(void* dst, size_t bytes, Stream s) override {
    if (bytes == 0) return;
    if (s == Stream::Compute) {
      std::memset(dst, 0, bytes);
      return;
    }
    engine(s).push([=] { std::memset(dst, 0, bytes); });
  }
  std::unique_ptr<Event> new_event() override { return std::make_unique<SimEvent>(); }
  void record(Event& e, Stream s) override {
    auto& ev = const_cast<SimEvent&>(sim_event(e));
    ev.engine = &engine(s) == &out_ ? 1 : 0;
    ev.seq = s == Stream::Compute ? 0 : engine(s).issued();
  }
  // Each copy stream runs in order and compute work is done when issued, so a wait for compute
  // work, or for a stream's own, has nothing to wait for. The compute stream's wait for a copy is
  // the host thread's; a copy stream's for the other's, an item in its queue (which cannot wait in
  // a cycle: an event names only work issued before the wait).
  void wait(Stream s, const Event& e) override {
    const SimEvent& ev = sim_event(e);
    if (ev.seq == 0) return;
    CopyEngine& on = ev.engine ? out_ : in_;
    if (s == Stream::Compute) return on.wait_for(ev.seq);
    if (&engine(s) == &on) return;
    engine(s).push([&on, seq = ev.seq] { on.reached(seq); }, false);
  }
  void synchronize(const Event& e) override {
    ++waits_.event_waits;
    const SimEvent& ev = sim_event(e);
    (ev.engine ? out_ : in_).wait_for(ev.seq);
  }
  // the sum of the device's values comes back to the host (the gradient norm): on a GPU, a drain
  double do_sum_squares(const Tensor& x) override {
    if (x.tier == Tier::Device && x.numel() > 0) ++waits_.drains;  // (CUDA returns 0 at once)
    return CpuBackend::do_sum_squares(x);
  }
  void synchronize() override {
    ++waits_.drains;
    drain_engines();
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
  CopyEngine& engine(Stream s) { return s == Stream::CopyOut && !one_ ? out_ : in_; }
  void drain_engines() {
    in_.wait_for(in_.issued());
    out_.wait_for(out_.issued());
  }

  CopyEngine in_, out_;  // Stream::Copy's and Stream::CopyOut's
  const bool one_ = copy_streams_from_env() == 1;  // OOMB_COPY_STREAMS=1: in_ for both
  HostWaits waits_{0, 0};
};

}  // namespace

std::unique_ptr<Backend> make_sim_backend(int64_t capacity, int64_t copy_delay_us, int64_t copy_out_delay_us) {
  OOMB_CHECK(capacity >= 0, "--device-memory: must not be negative, got {}", capacity);
  set_device_allocator(DeviceAllocator{&sim_alloc, &sim_free});
  set_device_memory_is_host(true);
  const int64_t delay = copy_delay_us >= 0 ? copy_delay_us : delay_from_env();
  return std::make_unique<SimBackend>(capacity, delay, copy_out_delay_us >= 0 ? copy_out_delay_us : delay);
}

}  // namespace oomb
