#include "posenc/util/interrupt.h"

#include <signal.h>

namespace posenc {
namespace {

std::atomic<bool> g_requested{false};
std::atomic<int> g_signal{0};
struct sigaction g_old_int {
}, g_old_term{};

extern "C" void on_stop_signal(int sig) {
  if (g_requested.load()) {
    // The second signal: stop now, as if no handler were installed (it is
    // delivered when this handler returns and unblocks it).
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
  sigaddset(&action.sa_mask, SIGINT);  // one handler at a time
  sigaddset(&action.sa_mask, SIGTERM);
  ::sigaction(SIGINT, &action, &g_old_int);
  ::sigaction(SIGTERM, &action, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
}

int interrupt_signal() { return g_requested.load() ? g_signal.load() : 0; }

const std::atomic<bool>& interrupt_flag() { return g_requested; }

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

Interrupted::Interrupted(int signal) : std::runtime_error("stopped by " + signal_name(signal)), signal_(signal) {}

void throw_if_interrupted() {
  if (const int sig = interrupt_signal()) throw Interrupted(sig);
}

}  // namespace posenc
