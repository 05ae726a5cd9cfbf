// An optimizer update that runs beside the next pass (--offload params: AdamW on the host CPU
// while the device starts the next step): the update finishes the parameters' units in order
// (ParamStore::update_unit), and the pass waits for each unit before it reads it. A failed update
// hands its error to whoever waits.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>

namespace oomb {

class UpdateGate {
 public:
  // A new update: none of its units done yet. hold (tests): the update does each unit only once the pass
  // waits for it or a later one, or release() is called (hold_unit), so a pass that skips a wait
  // reads the old weights whatever the machine's load.
  void start(int64_t units, bool hold = false);
  void hold_unit(int64_t unit);      // the update's side, before each unit: returns at once unless holding
  void release();                    // holding no more (before the update is joined)
  void done(int64_t unit);           // units finish in order 0, 1, ...
  void fail(std::exception_ptr e);   // the update stopped: waits rethrow e
  void wait(int64_t unit);           // until unit is done (at once when no update runs)
  bool running();                    // an update started and not every unit done
  double take_waited_s();            // seconds wait() blocked since the last call

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t units_ = 0, done_ = 0;
  bool hold_ = false;
  int64_t requested_ = -1;  // the latest unit a pass waited for (while holding)
  std::exception_ptr error_;
  double waited_s_ = 0;
};

}  // namespace oomb
