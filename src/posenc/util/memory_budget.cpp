#include "posenc/util/memory_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "posenc/util/text.h"

namespace posenc {
namespace {

/// The number after `key` on a "key N ..." line of `file` (/proc/meminfo,
/// /proc/self/status, a cgroup's memory.stat), read line by line so that lines
/// whose value is not a number ("Name: posenc") are passed over; -1 where absent.
double keyed_value(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string k;
    double value = 0;
    if (fields >> k >> value && k == key) return value;
  }
  return -1;
}

/// A number in a one-line file (cgroup's memory.max, memory.current); -1 where
/// absent or "max" (no limit).
double number_in_file(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  try {
    return std::stod(word);
  } catch (const std::exception&) {
    return -1;
  }
}

/// The cgroup (v2) directory of this process, from /proc/self/cgroup's "0::/path".
std::string own_cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return "";
}

}  // namespace

MemoryBudget cpu_memory_budget() {
  MemoryBudget best;
  const auto consider = [&](double bytes, const std::string& source) {
    if (bytes < 0) return;
    if (best.source.empty() || bytes < best.bytes) best = {std::max(bytes, 1.0), source};
  };
  const double available_kb = keyed_value("/proc/meminfo", "MemAvailable:");
  consider(available_kb < 0 ? -1 : available_kb * 1024.0, "MemAvailable");
  // ulimit -v: what is left of the address space after what is mapped now.
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const double mapped = std::max(keyed_value("/proc/self/status", "VmSize:"), 0.0) * 1024.0;
    consider(static_cast<double>(as.rlim_cur) - mapped, "what the address-space limit, ulimit -v, leaves");
  }
  // The cgroup's limit, of this process's group and each one above it.
  for (std::string dir = own_cgroup_dir(); dir.size() > std::string("/sys/fs/cgroup").size();
       dir = dir.substr(0, dir.find_last_of('/'))) {
    const double max = number_in_file(dir + "/memory.max");
    if (max < 0) continue;
    // The page cache the group holds is given back under pressure: not used.
    const double used = std::max(
        number_in_file(dir + "/memory.current") - std::max(keyed_value(dir + "/memory.stat", "file"), 0.0), 0.0);
    consider(max - used, "what the memory.max of cgroup " + dir + " leaves");
  }
  return best;
}

std::string describe_budget(const MemoryBudget& budget) {
  return format_bytes(budget.bytes) + " is available (" + budget.source + ")";
}

}  // namespace posenc
