#include "model/update_gate.h"

#include <chrono>

namespace oomb {

void UpdateGate::start(int64_t units, bool hold) {
  std::lock_guard<std::mutex> lock(mu_);
  units_ = units, done_ = 0, error_ = nullptr;
  hold_ = hold, requested_ = -1;
}

void UpdateGate::hold_unit(int64_t unit) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !hold_ || unit <= requested_; });
}

void UpdateGate::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
  }
  cv_.notify_all();
}

void UpdateGate::done(int64_t unit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = unit + 1;
  }
  cv_.notify_all();
}

void UpdateGate::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = e;
  }
  cv_.notify_all();
}

void UpdateGate::wait(int64_t unit) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto ready = [&] { return error_ != nullptr || unit < done_ || done_ >= units_; };
  if (!ready()) {
    if (hold_ && unit > requested_) requested_ = unit, cv_.notify_all();
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(lock, ready);
    waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (error_ && !(unit < done_)) std::rethrow_exception(error_);
}

double UpdateGate::take_waited_s() {
  std::lock_guard<std::mutex> lock(mu_);
  const double w = waited_s_;
  waited_s_ = 0;
  return w;
}

bool UpdateGate::running() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ < units_ && !error_;
}

}  // namespace oomb
