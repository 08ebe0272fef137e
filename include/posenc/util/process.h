// This process's own executable, to start children of the same build, and
// running a short command (sbatch, squeue) for its output.
#pragma once

#include <string>
#include <vector>

namespace posenc {

/// This executable's path (/proc/self/exe).
std::string self_executable();

/// Runs argv (argv[0] looked up on PATH) to its end, with stdin closed;
/// `output` gets its stdout and stderr. Returns its exit status: 128 + signal
/// if a signal ended it, 127 if it could not start.
int run_command(const std::vector<std::string>& argv, std::string& output);

/// Appends what `fd` gives to `output` until its end (or a read error other
/// than an interruption).
void read_until_end(int fd, std::string& output);

/// A waitpid status as a shell reports it: the exit status, 128 + the signal
/// that ended the process, 127 for anything else.
int shell_exit_code(int wait_status);

}  // namespace posenc
