#include "posenc/util/memory_budget.h"

#include <sys/resource.h>

#include <fstream>
#include <algorithm>

#include "posenc/util/text.h"

namespace posenc {
namespace {

/// A "Key: N kB" line of a /proc file, in bytes; -1 where absent.
double proc_kb(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string k, unit;
  double kb = 0;
  while (in >> k >> kb) {
    std::getline(in, unit);
    if (k == key) return kb * 1024.0;
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

/// A "key N" line of a cgroup's memory.stat; 0 where absent.
double stat_value(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string k;
  double v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
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
  consider(proc_kb("/proc/meminfo", "MemAvailable:"), "MemAvailable");
  // ulimit -v: what is left of the address space after what is mapped now.
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const double mapped = std::max(proc_kb("/proc/self/status", "VmSize:"), 0.0);
    consider(static_cast<double>(as.rlim_cur) - mapped, "what the address-space limit, ulimit -v, leaves");
  }
  // The cgroup's limit, of this process's group and each one above it.
  for (std::string dir = own_cgroup_dir(); dir.size() > std::string("/sys/fs/cgroup").size();
       dir = dir.substr(0, dir.find_last_of('/'))) {
    const double max = number_in_file(dir + "/memory.max");
    if (max < 0) continue;
    // The page cache the group holds is given back under pressure: not used.
    const double used =
        std::max(number_in_file(dir + "/memory.current") - stat_value(dir + "/memory.stat", "file"), 0.0);
    consider(max - used, "what the memory.max of cgroup " + dir + " leaves");
  }
  return best;
}

std::string describe_budget(const MemoryBudget& budget) {
  return format_bytes(budget.bytes) + " is available (" + budget.source + ")";
}

}  // namespace posenc
