// SIGINT, SIGTERM and SIGHUP as a request to stop cleanly. While an InterruptGuard is
// alive, the first signal only sets a flag that long loops poll (training
// finishes its step and writes a checkpoint; evaluation stops between
// batches); a second SIGINT (Ctrl-C again) or a signal of another kind ends
// the process at once with the default action, while a repeat of the SIGTERM
// or SIGHUP that asked to stop is the same stop (a cluster can deliver it
// twice: to every process of a job step, and through the job script).
// Nothing is lost either way: every file is written atomically.
// No torch here.
#pragma once

#include <atomic>
#include <stdexcept>
#include <string>

#include "posenc/errors.h"

namespace posenc {

class InterruptGuard {
 public:
  InterruptGuard();   ///< installs the handlers and clears the flag
  ~InterruptGuard();  ///< puts the previous handlers back
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

/// The signal that asked to stop (SIGINT, SIGTERM, SIGHUP), or 0.
int interrupt_signal();

/// The flag itself, for code that takes an atomic<bool> (the process pool).
const std::atomic<bool>& interrupt_flag();

/// "SIGINT" / "SIGTERM" / "SIGHUP".
std::string signal_name(int signal);

/// Throws Interrupted if a stop was requested.
void throw_if_interrupted();

}  // namespace posenc
