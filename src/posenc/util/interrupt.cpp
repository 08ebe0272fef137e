#include "posenc/util/interrupt.h"

#include <signal.h>

#include <iterator>

namespace posenc {
namespace {

std::atomic<bool> g_requested{false};
std::atomic<int> g_signal{0};
// The signals that ask to stop. SIGHUP (a closed terminal or SSH session) is
// one: otherwise its default action would end a run without a checkpoint.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_old[3];

extern "C" void on_stop_signal(int sig) {
  if (g_requested.load()) {
    // A repeat of SIGTERM or SIGHUP is the same stop arriving twice: Slurm
    // signals every process of a job step and the job script forwards the
    // same signal, and a cluster's hard stop comes as SIGKILL after its grace
    // anyway. Ctrl-C pressed again, or another signal, means stop now.
    if (sig == g_signal.load() && sig != SIGINT) return;
    // Stop now, as if no handler were installed (the signal is delivered
    // when this handler returns and unblocks it).
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_signal.store(sig);
  g_requested.store(true);
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_requested.store(false);
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : kStopSignals) sigaddset(&action.sa_mask, sig);  // one handler at a time
  for (size_t i = 0; i < std::size(kStopSignals); ++i) ::sigaction(kStopSignals[i], &action, &g_old[i]);
}

InterruptGuard::~InterruptGuard() {
  // After a stop by SIGTERM or SIGHUP the process is on its way out with
  // 128 + signal: later repeats of that signal stay ignored, not fatal.
  const int stopping = interrupt_signal();
  for (size_t i = 0; i < std::size(kStopSignals); ++i) {
    if (kStopSignals[i] == stopping && stopping != SIGINT) {
      ::signal(stopping, SIG_IGN);
      continue;
    }
    ::sigaction(kStopSignals[i], &g_old[i], nullptr);
  }
}

int interrupt_signal() { return g_requested.load() ? g_signal.load() : 0; }

const std::atomic<bool>& interrupt_flag() { return g_requested; }

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGHUP) return "SIGHUP";
  return "signal " + std::to_string(signal);
}

Interrupted::Interrupted(int signal) : std::runtime_error("stopped by " + signal_name(signal)), signal_(signal) {}

void throw_if_interrupted() {
  if (const int sig = interrupt_signal()) throw Interrupted(sig);
}

}  // namespace posenc
