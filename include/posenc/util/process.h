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

}  // namespace posenc
