// A fork server, both ends. Starting posenc costs about a CPU-second before
// main (loading LibTorch's ~290 shared libraries and registering its
// operators), and the test suite starts it hundreds of times. Started with
// POSENC_FORK_SERVER=PATH, posenc loads all that once, listens on the Unix
// socket PATH and forks a child per request; the child goes on through main as
// a posenc started with the request's arguments, environment and directory
// would. tests/fork_client.h starts one per test process and sends it the
// suite's commands (docs/ARCHITECTURE.md, "Layout"; docs/platforms.md, "CI").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace posenc {

/// The environment variable that makes posenc a fork server.
inline constexpr const char* kForkServerVariable = "POSENC_FORK_SERVER";

/// Serves requests on the Unix socket `path`, one at a time, until the process
/// that started the server ends (PR_SET_PDEATHSIG) or kills it: SIGKILL, since
/// the server keeps any SIGTERM its starter ignored. Returns only in a forked
/// child, with the child's argv, its stdout and stderr on the request's
/// descriptor, its environment and working directory the request's. A request
/// whose environment differs from the server's in a variable that libraries
/// read as they load (OPENBLAS_*, OMP_*, LD_*, ATEN_*, sanitizers' options, ...)
/// is refused: forking would give it the server's choice.
std::vector<std::string> serve_forks(const std::string& path);

/// What a client asks the server to run.
struct ForkRequest {
  std::vector<std::string> argv;         ///< argv[0] first
  std::vector<std::string> environment;  ///< NAME=value: the child's whole environment
  std::string directory;                 ///< the child's working directory
  unsigned timeout_s = 0;                ///< as timeout(1): SIGTERM after so long; 0 for none
  /// Bit s-1 for signal s: what a process the caller starts would inherit
  /// (signals it ignores, signals it blocks); `caller_signal_state` fills both.
  uint64_t ignored_signals = 0;
  uint64_t blocked_signals = 0;
};

/// This process's ignored and blocked signals, as `ForkRequest` holds them.
void caller_signal_state(ForkRequest& request);

/// How a child ran: its stdout and stderr together, and how it ended.
struct ForkRun {
  std::string output;
  int status = 0;          ///< as waitpid gives it
  bool timed_out = false;  ///< the timeout sent it SIGTERM
};

/// Runs `request` on the server listening at `path` and waits for the child's
/// end, reading its output. std::nullopt where the server cannot run it (none
/// listening, or the request refused): the caller starts posenc itself.
std::optional<ForkRun> run_on_fork_server(const std::string& path, const ForkRequest& request);

}  // namespace posenc
