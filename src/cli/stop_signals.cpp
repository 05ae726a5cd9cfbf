#include "cli/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/error.h"

namespace oomb::cli {

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
struct sigaction g_old_int, g_old_term;

std::atomic<const char*> g_note{""};  // said on stderr when the first signal arrives
static_assert(std::atomic<const char*>::is_always_lock_free);

// async-signal-safe: lock-free atomics, sigaction(2) and write(2)
void on_signal(int sig) {
  g_signal.store(sig);
  struct sigaction dfl;  // a second signal, of either kind, takes the default action
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGINT, &dfl, nullptr);
  ::sigaction(SIGTERM, &dfl, nullptr);
  const char* note = g_note.load();
  ssize_t ignored = ::write(STDERR_FILENO, note, std::strlen(note));
  (void)ignored;
}

}  // namespace

StopSignals::StopSignals(const char* note) {
  g_signal.store(0);
  g_note.store(note);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_RESETHAND;  // system calls go on; a second signal takes the default action
  OOMB_CHECK(::sigaction(SIGINT, &sa, &g_old_int) == 0 && ::sigaction(SIGTERM, &sa, &g_old_term) == 0,
             "cannot install the SIGINT/SIGTERM handlers: {}", std::strerror(errno));
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::pending() const { return g_signal.load(); }

void StopSignals::set_note(const char* note) { g_note.store(note); }

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace oomb::cli
