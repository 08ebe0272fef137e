#include "posenc/util/launch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "posenc/errors.h"

namespace posenc {

namespace {

/// A whole decimal number in [lo, hi], or ConfigError naming the variable.
int read_int(const char* name, const char* text, int lo, int hi) {
  const std::string s = text;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw ConfigError(std::string(name) + "=\"" + s + "\" is not a whole number in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
  return static_cast<int>(v);
}

constexpr int kMaxRanks = 1 << 16;

Launch from_torchrun(const std::function<const char*(const char*)>& getenv) {
  Launch l;
  l.source = "RANK/WORLD_SIZE";
  const char* world = getenv("WORLD_SIZE");
  const char* rank = getenv("RANK");
  if (!world) throw ConfigError("RANK is set but WORLD_SIZE is not: set both (and MASTER_ADDR, MASTER_PORT)");
  l.world_size = read_int("WORLD_SIZE", world, 1, kMaxRanks);
  if (!rank) throw ConfigError("WORLD_SIZE is set but RANK is not: set both (and MASTER_ADDR, MASTER_PORT)");
  l.rank = read_int("RANK", rank, 0, l.world_size - 1);
  const char* local = getenv("LOCAL_RANK");
  l.local_rank = local ? read_int("LOCAL_RANK", local, 0, l.world_size - 1) : l.rank;
  if (!l.distributed()) return l;
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  if (!addr || !*addr)
    throw ConfigError("WORLD_SIZE=" + std::to_string(l.world_size) +
                      " without MASTER_ADDR: set MASTER_ADDR (and MASTER_PORT) to where rank 0 runs");
  if (!port)
    throw ConfigError("WORLD_SIZE=" + std::to_string(l.world_size) +
                      " without MASTER_PORT: set it to a free TCP port on " + addr);
  l.master_addr = addr;
  l.master_port = read_int("MASTER_PORT", port, 1, 65535);
  return l;
}

Launch from_srun(const std::function<const char*(const char*)>& getenv) {
  Launch l;
  l.source = "srun";
  const char* tasks = getenv("SLURM_STEP_NUM_TASKS");
  if (!tasks) tasks = getenv("SLURM_NTASKS");
  if (!tasks) return Launch{};
  l.world_size = read_int("SLURM_STEP_NUM_TASKS", tasks, 1, kMaxRanks);
  if (!l.distributed()) return Launch{};
  const char* procid = getenv("SLURM_PROCID");
  if (!procid) throw ConfigError("an srun step of " + std::to_string(l.world_size) + " tasks without SLURM_PROCID");
  l.rank = read_int("SLURM_PROCID", procid, 0, l.world_size - 1);
  const char* local = getenv("SLURM_LOCALID");
  l.local_rank = local ? read_int("SLURM_LOCALID", local, 0, l.world_size - 1) : 0;
  if (const char* addr = getenv("MASTER_ADDR"); addr && *addr) {
    l.master_addr = addr;
  } else {
    const char* nodes = getenv("SLURM_STEP_NODELIST");
    if (!nodes) nodes = getenv("SLURM_JOB_NODELIST");
    if (!nodes) throw ConfigError("an srun step without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: set MASTER_ADDR");
    l.master_addr = first_slurm_host(nodes);
  }
  if (const char* port = getenv("MASTER_PORT")) {
    l.master_port = read_int("MASTER_PORT", port, 1, 65535);
  } else {
    const char* job = getenv("SLURM_JOB_ID");
    const char* step = getenv("SLURM_STEP_ID");
    l.master_port =
        slurm_step_port(job ? std::strtoll(job, nullptr, 10) : 0, step ? std::strtoll(step, nullptr, 10) : 0);
  }
  return l;
}

}  // namespace

Launch read_launch(const std::function<const char*(const char*)>& getenv) {
  if (getenv("RANK") || getenv("WORLD_SIZE")) return from_torchrun(getenv);
  if (getenv("SLURM_STEP_ID") && getenv("SLURM_PROCID")) return from_srun(getenv);
  return Launch{};
}

Launch read_launch_from_environment() {
  return read_launch([](const char* name) { return std::getenv(name); });
}

int slurm_step_port(int64_t job_id, int64_t step_id) {
  // Below Linux's ephemeral range (32768-60999), where the kernel picks the
  // ports of outgoing connections. Jobs on one node at one time have ids close
  // together, so the job id moves the port by 1 and wraps only after 12,768
  // jobs; a later step of the same job moves it by a stride coprime with the
  // range (7,919), so that steps 0-7 of jobs less than 1,291 apart never meet.
  constexpr int64_t kFirst = 20000, kCount = 32768 - 20000, kStepStride = 7919;
  const int64_t slot = ((job_id % kCount) + (step_id % kCount) * kStepStride) % kCount;
  return static_cast<int>(kFirst + (slot < 0 ? slot + kCount : slot));
}

std::string first_slurm_host(const std::string& nodelist) {
  const auto bad = [&] { return ConfigError("cannot read the Slurm node list \"" + nodelist + "\""); };
  // The first entry: up to the first comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    const char c = nodelist[end];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) throw bad();
    if (c == ',' && depth == 0) break;
  }
  const std::string entry = nodelist.substr(0, end);
  if (entry.empty() || depth != 0) throw bad();
  const size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  const size_t close = entry.find(']', open);
  // "prefix[03-05,9]suffix": the first number of the first range, its zero padding kept.
  const size_t first_end = entry.find_first_of(",-]", open + 1);
  const std::string first = entry.substr(open + 1, first_end - open - 1);
  if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) throw bad();
  return entry.substr(0, open) + first + entry.substr(close + 1);
}

std::vector<std::string> local_rank_environment(int rank, int world_size, int port) {
  return {"RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(world_size),
          "LOCAL_RANK=" + std::to_string(rank),
          "LOCAL_WORLD_SIZE=" + std::to_string(world_size),
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=" + std::to_string(port)};
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("cannot open a socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot find a free TCP port on 127.0.0.1: " + why);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace posenc
