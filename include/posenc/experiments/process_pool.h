// Runs independent commands N at a time as child processes, each with its
// output appended to its own log file, and reports progress while they run.
// No torch here: the children are `posenc train` processes.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace posenc {

struct Job {
  std::string id;
  std::vector<std::string> argv;  ///< argv[0] is the program path
  std::string log_path;           ///< stdout and stderr are appended here (empty: this process's own)
};

struct JobOutcome {
  std::string id;
  int exit_code = 0;  ///< 128 + signal number if killed by a signal; 127 if it could not start
  double seconds = 0;
};

struct PoolStatus {
  std::vector<std::string> running;  ///< ids, in start order
  size_t finished = 0, failed = 0, left = 0;
  double elapsed_s = 0;
};

/// Starts at most `parallel` jobs at a time, in order; calls on_tick about
/// once per `tick_s` seconds and on_done after each job ends. Returns one
/// outcome per job, in job order (exit_code -1: never started). A job that
/// fails does not stop the others. When *stop becomes true, running jobs get
/// SIGTERM, are waited for, and no new job starts.
/// Children see POSENC_PARENT_PID (see die_with_parent()).
std::vector<JobOutcome> run_pool(const std::vector<Job>& jobs, int parallel,
                                 const std::function<void(const PoolStatus&)>& on_tick,
                                 const std::function<void(const JobOutcome&)>& on_done, double tick_s = 1.0,
                                 const std::atomic<bool>* stop = nullptr);

/// Starts args (args[0] a path) in a process group of its own, with this
/// environment plus POSENC_PARENT_PID and `extra_env` ("NAME=VALUE", each
/// replacing a variable of that name); stdout and stderr are appended to
/// `log_path`, or are this process's own when it is empty. Returns the pid, or
/// -1 with the reason in *error.
pid_t spawn_child(const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
                  const std::string& log_path, std::string* error);

/// A waitpid status as a shell reports it: the exit code, or 128 + the signal
/// that ended the process.
int exit_status(int wait_status);

/// In a child started by run_pool: ask the kernel for SIGTERM when the parent
/// dies (even by SIGKILL), so that no orphan keeps writing a run directory
/// that a rerun would start again. Returns false if the parent is already gone.
bool die_with_parent();

/// The last `n` lines of a text file (for showing why a job failed).
std::string tail_lines(const std::string& path, size_t n);

}  // namespace posenc
