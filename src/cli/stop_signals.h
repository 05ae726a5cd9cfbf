// SIGINT and SIGTERM while training with --checkpoint-dir, or while a finished run saves --out: the
// first one is noted, saying `note` on stderr (the step under way finishes, a checkpoint is written
// and the run stops, saying where it is; or the save finishes); a second one stops the process at
// once, as without the handler (the checkpoints already written are whole, an earlier --out intact).
#pragma once

namespace oomb::cli {

class StopSignals {
 public:
  explicit StopSignals(const char* note);  // installs the handlers; `note`: a static string
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int pending() const;  // the signal received (SIGINT, SIGTERM), or 0
  void set_note(const char* note);  // what the first signal says from now on (one pending stays)
};

const char* signal_name(int sig);  // "SIGINT", "SIGTERM"

}  // namespace oomb::cli
