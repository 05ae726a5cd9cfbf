#include "model/update_gate.h"

namespace oomb {

void UpdateGate::start(int64_t units) {
  std::lock_guard<std::mutex> lock(mu_);
  units_ = units, done_ = 0, error_ = nullptr;
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
  cv_.wait(lock, [&] { return error_ != nullptr || unit < done_ || done_ >= units_; });
  if (error_ && !(unit < done_)) std::rethrow_exception(error_);
}

bool UpdateGate::running() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ < units_ && !error_;
}

}  // namespace oomb
