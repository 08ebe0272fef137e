#include "posenc/experiments/process_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace posenc {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

struct Running {
  size_t index;
  Clock::time_point started;
};

/// Starts one job with stdout/stderr appended to its log; returns the pid or -1.
pid_t spawn(const Job& job) {
  std::string error;
  const pid_t pid = spawn_child(job.argv, {}, job.log_path, &error);
  if (pid < 0 && job.log_path.empty()) std::fprintf(stderr, "%s\n", error.c_str());
  if (pid < 0 && !job.log_path.empty()) std::ofstream(job.log_path, std::ios::app) << error << "\n";
  return pid;
}

}  // namespace

int exit_status(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                                : 128 + (WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
}

pid_t spawn_child(const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
                  const std::string& log_path, std::string* error) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log_path.empty()) {
    const fs::path log(log_path);
    if (log.has_parent_path()) fs::create_directories(log.parent_path());
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  posix_spawn_file_actions_addclose(&actions, STDIN_FILENO);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The environment plus POSENC_PARENT_PID, for die_with_parent() in the
  // child, and extra_env, each replacing a variable of the same name.
  std::vector<std::string> added = extra_env;
  added.push_back("POSENC_PARENT_PID=" + std::to_string(::getpid()));
  const auto replaced = [&](const char* entry) {
    for (const auto& a : added) {
      const size_t eq = a.find('=');
      if (std::strncmp(entry, a.c_str(), eq + 1) == 0) return true;
    }
    return false;
  };
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (!replaced(*e)) env.push_back(*e);
  for (auto& a : added) env.push_back(a.data());
  env.push_back(nullptr);
  // Each child in a process group of its own: a Ctrl-C on the terminal reaches
  // only the parent, which passes the stop on once; a child that got the
  // terminal's SIGINT as well would take the parent's signal as a second one
  // and stop without its checkpoint.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    if (error) *error = "could not start " + args[0] + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

std::vector<JobOutcome> run_pool(const std::vector<Job>& jobs, int parallel,
                                 const std::function<void(const PoolStatus&)>& on_tick,
                                 const std::function<void(const JobOutcome&)>& on_done, double tick_s,
                                 const std::atomic<bool>* stop) {
  if (parallel < 1) throw std::invalid_argument("run_pool: parallel must be >= 1");
  std::vector<JobOutcome> outcomes(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) outcomes[i] = {jobs[i].id, -1, 0};
  std::map<pid_t, Running> running;
  std::deque<size_t> queue;
  for (size_t i = 0; i < jobs.size(); ++i) queue.push_back(i);
  PoolStatus status;
  const auto t0 = Clock::now();
  auto last_tick = t0 - std::chrono::hours(1);

  const auto finish = [&](size_t index, int code, Clock::time_point started) {
    JobOutcome& o = outcomes[index];
    o.id = jobs[index].id;
    o.exit_code = code;
    o.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    ++status.finished;
    if (code != 0) ++status.failed;
    if (on_done) on_done(o);
  };

  bool stopping = false;
  while (!queue.empty() || !running.empty()) {
    if (!stopping && stop && stop->load()) {
      stopping = true;
      queue.clear();
      for (const auto& [pid, _] : running) ::kill(pid, SIGTERM);
    }
    while (!queue.empty() && running.size() < static_cast<size_t>(parallel)) {
      const size_t i = queue.front();
      queue.pop_front();
      const auto started = Clock::now();
      const pid_t pid = spawn(jobs[i]);
      if (pid < 0)
        finish(i, 127, started);
      else
        running[pid] = {i, started};
    }
    // Reap whatever has ended; otherwise sleep a little.
    int wstatus = 0;
    const pid_t pid = running.empty() ? 0 : ::waitpid(-1, &wstatus, WNOHANG);
    if (pid > 0 && running.count(pid)) {
      const Running r = running[pid];
      running.erase(pid);
      finish(r.index, exit_status(wstatus), r.started);
      continue;
    }
    if (pid < 0 && errno != EINTR && errno != ECHILD)
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    if (on_tick && Clock::now() - last_tick >= std::chrono::duration<double>(tick_s)) {
      last_tick = Clock::now();
      status.running.clear();
      std::vector<std::pair<Clock::time_point, std::string>> order;
      for (const auto& [_, r] : running) order.emplace_back(r.started, jobs[r.index].id);
      std::sort(order.begin(), order.end());
      for (const auto& [__, id] : order) status.running.push_back(id);
      status.left = queue.size();
      status.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
      on_tick(status);
    }
    if (!running.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return outcomes;
}

bool die_with_parent() {
  const char* parent = std::getenv("POSENC_PARENT_PID");
  if (parent == nullptr) return true;
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  return std::to_string(::getppid()) == parent;  // it may have died before the prctl
}

std::string tail_lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    // Progress lines rewrite themselves with '\r': keep the last state.
    const auto cr = line.rfind('\r');
    if (cr != std::string::npos) line = line.substr(cr + 1);
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace posenc
