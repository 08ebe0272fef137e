// How much memory this process may still take on the CPU: the least of what
// the system has free (MemAvailable), what its address-space limit leaves
// (ulimit -v), and what its cgroup's memory.max leaves (a container, a Slurm
// job, systemd-run -p MemoryMax). Every check of a computation's memory asks
// here, so a run refused by none of them cannot die of a limit it never read.
// No torch here.
#pragma once

#include <string>

namespace posenc {

struct MemoryBudget {
  double bytes = 0;  ///< 0: nothing known, nothing to check
  std::string
      source;  ///< which bound it is, for messages: "MemAvailable", "what the address-space limit, ulimit -v, leaves", ...
};

/// The CPU's budget now.
MemoryBudget cpu_memory_budget();

/// "4.0 GiB is available (MemAvailable)": the phrase messages end with.
std::string describe_budget(const MemoryBudget& budget);

}  // namespace posenc
