#include "posenc/util/fork_server.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "posenc/util/process.h"

extern char** environ;

// The wire, client to server: one byte with the child's output descriptor
// attached (SCM_RIGHTS); four uint32 (argc, number of environment entries,
// timeout in seconds, payload bytes); two uint64 (ignored and blocked
// signals); the payload: the directory, argv, then the environment, each
// string ended by '\0'. Server to client: 'F' once the
// child is forked or 'R' for a refusal; after the child's end, two int32 (its
// wait status, and 1 if the timeout ended it).

namespace posenc {
namespace {

constexpr char kForked = 'F';
constexpr char kRefused = 'R';
constexpr uint32_t kMaxPayload = 64u << 20;

/// Variables that a library reads as it loads, or that the C library and the
/// sanitizers read at start: a forked child keeps the server's choice of them.
bool read_at_load(const std::string& entry) {
  static const char* const prefixes[] = {"LD_",   "OPENBLAS_", "GOTO",   "OMP_",     "GOMP_",          "KMP_",
                                         "MKL_",  "ATEN_",     "TORCH_", "PYTORCH_", "GLIBC_TUNABLES", "MALLOC_",
                                         "ASAN_", "LSAN_",     "UBSAN_", "TSAN_",    "CUDA_",          "NCCL_"};
  return std::any_of(std::begin(prefixes), std::end(prefixes),
                     [&](const char* p) { return entry.compare(0, std::strlen(p), p) == 0; });
}

std::vector<std::string> load_time_subset(const std::vector<std::string>& environment) {
  std::vector<std::string> subset;
  for (const auto& entry : environment)
    if (read_at_load(entry)) subset.push_back(entry);
  std::sort(subset.begin(), subset.end());
  return subset;
}

std::vector<std::string> own_environment() {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) out.emplace_back(*e);
  return out;
}

bool read_all(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool send_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);  // a client gone must not kill the server
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path))
    throw std::runtime_error("fork server: socket path too long (" + std::to_string(path.size()) + " bytes): " + path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

/// One byte with room for one descriptor beside it (SCM_RIGHTS): how the
/// child's output travels to the server.
struct DescriptorMessage {
  char byte = 'Q';
  iovec io{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{};
  DescriptorMessage() {
    header.msg_iov = &io;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof(control);
  }
  DescriptorMessage(const DescriptorMessage&) = delete;
  DescriptorMessage& operator=(const DescriptorMessage&) = delete;
};

/// A request as the server holds it, with the output descriptor received.
struct Received {
  ForkRequest request;
  int output_fd = -1;
};

bool receive(int connection, Received& into) {
  DescriptorMessage message;
  if (::recvmsg(connection, &message.header, MSG_CMSG_CLOEXEC) != 1) return false;
  const cmsghdr* header = CMSG_FIRSTHDR(&message.header);
  if (!header || header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) return false;
  std::memcpy(&into.output_fd, CMSG_DATA(header), sizeof(int));
  uint32_t counts[4];   // argc, environment entries, timeout, payload bytes
  uint64_t signals[2];  // ignored, blocked
  if (!read_all(connection, counts, sizeof(counts)) || counts[3] > kMaxPayload ||
      !read_all(connection, signals, sizeof(signals)))
    return false;
  std::string payload(counts[3], '\0');
  if (!read_all(connection, payload.data(), payload.size())) return false;
  std::vector<std::string> strings;
  for (size_t at = 0; at < payload.size();) {
    const size_t end = payload.find('\0', at);
    if (end == std::string::npos) return false;
    strings.push_back(payload.substr(at, end - at));
    at = end + 1;
  }
  if (strings.size() != 1 + size_t{counts[0]} + counts[1] || counts[0] == 0) return false;
  auto& r = into.request;
  r.ignored_signals = signals[0];
  r.blocked_signals = signals[1];
  r.directory = strings[0];
  r.argv.assign(strings.begin() + 1, strings.begin() + 1 + counts[0]);
  r.environment.assign(strings.begin() + 1 + counts[0], strings.end());
  r.timeout_s = counts[2];
  return true;
}

/// In the forked child: the caller's signal state, as a process it started
/// would have (ignored signals stay ignored across exec, handlers do not).
void take_signal_state(uint64_t ignored, uint64_t blocked) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s = 1; s <= 64; ++s) {
    const uint64_t bit = uint64_t{1} << (s - 1);
    if (s != SIGKILL && s != SIGSTOP) ::signal(s, (ignored & bit) ? SIG_IGN : SIG_DFL);  // glibc's own: EINVAL
    if (blocked & bit) sigaddset(&mask, s);
  }
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
}

/// In the forked child: the request's signal state, output, directory and environment.
std::vector<std::string> become(Received& received, int listener, int connection) {
  ::close(listener);
  ::close(connection);
  take_signal_state(received.request.ignored_signals, received.request.blocked_signals);
  if (received.request.timeout_s > 0) ::setpgid(0, 0);  // as timeout(1), which signals the whole group
  ::dup2(received.output_fd, STDOUT_FILENO);
  ::dup2(received.output_fd, STDERR_FILENO);
  ::close(received.output_fd);
  if (::chdir(received.request.directory.c_str()) != 0) {
    std::fprintf(stderr, "posenc fork server: cannot enter %s: %s\n", received.request.directory.c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  ::clearenv();
  for (const auto& entry : received.request.environment) ::putenv(::strdup(entry.c_str()));  // putenv keeps it
  return received.request.argv;
}

/// Waits for `child`; with a timeout, sends SIGTERM to its group when it is up
/// and waits on, as timeout(1) does.
ForkRun wait_for(pid_t child, unsigned timeout_s) {
  ForkRun end;
  if (timeout_s == 0) {
    while (::waitpid(child, &end.status, 0) < 0 && errno == EINTR) {
    }
    return end;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (::waitpid(child, &end.status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      end.timed_out = true;
      ::kill(-child, SIGTERM);
      while (::waitpid(child, &end.status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return end;
}

}  // namespace

std::vector<std::string> serve_forks(const std::string& path) {
  // Gone with the process that started it (a test process that crashed or was killed).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) ::_exit(0);
  ::signal(SIGCHLD, SIG_DFL);  // an ignored SIGCHLD, inherited, would reap the children before waitpid saw them
  const auto own = load_time_subset(own_environment());
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_un address = socket_address(path);
  if (listener < 0 || ::bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 8) != 0) {
    std::fprintf(stderr, "posenc fork server: cannot listen on %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  for (;;) {
    const int connection = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::fprintf(stderr, "posenc fork server: accept failed: %s\n", std::strerror(errno));
      std::exit(1);
    }
    Received received;
    if (!receive(connection, received)) {
      if (received.output_fd >= 0) ::close(received.output_fd);
      ::close(connection);
      continue;
    }
    const bool same_libraries = load_time_subset(received.request.environment) == own;
    const pid_t child = same_libraries ? ::fork() : -1;
    if (child == 0) return become(received, listener, connection);
    ::close(received.output_fd);
    if (child < 0) {
      send_all(connection, &kRefused, 1);
      ::close(connection);
      continue;
    }
    if (received.request.timeout_s > 0) ::setpgid(child, child);  // the child does too: whichever runs first
    send_all(connection, &kForked, 1);
    const ForkRun end = wait_for(child, received.request.timeout_s);
    const int32_t reply[2] = {end.status, end.timed_out ? 1 : 0};
    send_all(connection, reply, sizeof(reply));
    ::close(connection);
  }
}

void caller_signal_state(ForkRequest& request) {
  request.ignored_signals = request.blocked_signals = 0;
  sigset_t blocked;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
  for (int s = 1; s <= 64; ++s) {
    const uint64_t bit = uint64_t{1} << (s - 1);
    struct sigaction action {};
    if (::sigaction(s, nullptr, &action) == 0 && action.sa_handler == SIG_IGN) request.ignored_signals |= bit;
    if (sigismember(&blocked, s) == 1) request.blocked_signals |= bit;
  }
}

std::optional<ForkRun> run_on_fork_server(const std::string& path, const ForkRequest& request) {
  if (request.argv.empty()) return std::nullopt;
  const int connection = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connection < 0) return std::nullopt;
  const sockaddr_un address = socket_address(path);
  int output[2] = {-1, -1};
  const auto give_up = [&]() -> std::optional<ForkRun> {
    for (const int fd : {connection, output[0], output[1]})
      if (fd >= 0) ::close(fd);
    return std::nullopt;
  };
  if (::connect(connection, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) return give_up();
  if (::pipe2(output, O_CLOEXEC) != 0) return give_up();

  std::string payload = request.directory + '\0';
  for (const auto& s : request.argv) payload += s + '\0';
  for (const auto& s : request.environment) payload += s + '\0';
  const uint32_t counts[4] = {static_cast<uint32_t>(request.argv.size()),
                              static_cast<uint32_t>(request.environment.size()), request.timeout_s,
                              static_cast<uint32_t>(payload.size())};
  DescriptorMessage message;
  cmsghdr* header = CMSG_FIRSTHDR(&message.header);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &output[1], sizeof(int));
  const uint64_t signals[2] = {request.ignored_signals, request.blocked_signals};
  if (payload.size() > kMaxPayload || ::sendmsg(connection, &message.header, MSG_NOSIGNAL) != 1 ||
      !send_all(connection, counts, sizeof(counts)) || !send_all(connection, signals, sizeof(signals)) ||
      !send_all(connection, payload.data(), payload.size()))
    return give_up();
  ::close(output[1]);  // the child holds the write end now: end of file when it (and what it started) ends
  output[1] = -1;
  char answer = 0;
  if (!read_all(connection, &answer, 1) || answer != kForked) return give_up();

  ForkRun run;
  read_until_end(output[0], run.output);
  int32_t reply[2] = {0, 0};
  const bool ended = read_all(connection, reply, sizeof(reply));
  ::close(output[0]);
  ::close(connection);
  if (!ended) throw std::runtime_error("fork server: the server went away while its child ran");
  run.status = reply[0];
  run.timed_out = reply[1] != 0;
  return run;
}

}  // namespace posenc
