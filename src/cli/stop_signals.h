// SIGINT and SIGTERM while training with --checkpoint-dir: the first one is noted (the step under
// way finishes, a checkpoint is written and the run stops, saying where it is); a second one
// stops the process at once, as without the handler (the checkpoints already written are whole).
#pragma once

namespace oomb::cli {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int pending() const;  // the signal received (SIGINT, SIGTERM), or 0
};

const char* signal_name(int sig);  // "SIGINT", "SIGTERM"

}  // namespace oomb::cli
