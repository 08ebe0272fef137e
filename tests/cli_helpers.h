// Running the posenc binary from a test: exit code and combined output.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fork_client.h"
#include "posenc/util/process.h"

namespace posenc::testing {

struct CliRun {
  int code;
  std::string output;
};

/// Fails the test if `output` holds a report of AddressSanitizer, LeakSanitizer
/// or UndefinedBehaviorSanitizer: in a build with them (scripts/test-sanitizers.sh)
/// a command that met one may still exit with the code its test expects.
inline void expect_no_sanitizer_report(const std::string& output, const std::string& what) {
  for (const char* marker : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"})
    if (output.find(marker) != std::string::npos) {
      ADD_FAILURE() << what << " met a sanitizer:\n" << output;
      return;
    }
}

/// `run_cli` through `sh -c`, never on the fork server.
inline CliRun run_cli_in_shell(const std::string& args, const std::string& variables = "") {
  const std::string cmd = variables + " " + POSENC_BINARY + " " + args + " 2>&1";
  CliRun r{0, ""};
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  expect_no_sanitizer_report(r.output, "posenc " + args);
  return r;
}

/// Runs `posenc ARGS` (stdout and stderr together) as `sh -c` would, with
/// the prefix `variables` (`VAR=value ...`, `timeout N`) if given: on this
/// process's fork server where it can (fork_client.h), else through the shell.
inline CliRun run_cli(const std::string& args, const std::string& variables = "") {
  if (auto forked = run_cli_forked(args, variables)) {
    expect_no_sanitizer_report(forked->second, "posenc " + args);
    return {forked->first, std::move(forked->second)};
  }
  return run_cli_in_shell(args, variables);
}

/// `posenc train` on a config the repository ships (configs/NAME) into `out`,
/// with `flags` (`--set ...`) after it and no progress bar.
inline CliRun train_shipped(const std::string& name, const std::string& out, const std::string& flags) {
  return run_cli("train " + std::string(POSENC_SOURCE_DIR) + "/configs/" + name + " --out " + out + " " + flags +
                 " --no-progress");
}

/// A compare grid of tiny runs (seconds each) on the shipped ordering config.
inline nlohmann::json tiny_grid() {
  return {{"base", std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json"},
          {"set",
           {{"train.steps", 20},
            {"train.eval_every", 20},
            {"train.checkpoint_every", 10},
            {"train.log_every", 10},
            {"train.val_samples", 64},
            {"eval.lengths", {8, 32}},
            {"eval.samples_per_length", 64}}},
          {"schemes", {"none", "rope"}},
          {"seeds", {0}}};
}

/// Starts `posenc ARGS...` as a child with stdout and stderr in `log`; returns its pid.
inline pid_t start_cli(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {POSENC_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  return pid;
}

/// How a child ended: its exit code, or the signal that killed it.
struct ChildEnd {
  int code = -1;   ///< exit status if it exited
  int signal = 0;  ///< the killing signal if it did not
};

inline ChildEnd wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  ChildEnd end;
  if (WIFEXITED(status)) end.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) end.signal = WTERMSIG(status);
  return end;
}

/// Polls `done` until it holds or `seconds` pass; whether it held.
inline bool wait_for(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

/// The child's exit status (128 + the signal that killed it), or -1 if it was
/// still running after `seconds`: then it is killed (SIGKILL) and reaped.
inline int wait_exit_within(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/// A stand-in python3 in `dir` (for POSENC_PYTHON) that never finishes: it
/// says yes to every `-c "import ..."` check, then, when run for real, reads
/// one request line if `reads_request` (as bench's twin gets one), writes its
/// pid to dir/python.pid and sleeps. Returns its path.
inline std::string stand_in_python(const std::filesystem::path& dir, bool reads_request) {
  const std::filesystem::path path = dir / "python";
  std::ofstream(path) << "#!/bin/sh\n"
                         "[ \"$1\" = -c ] && exit 0\n"
                      << (reads_request ? "read request\n" : "")
                      << "echo $$ > \"$(dirname \"$0\")/python.pid\"\n"
                         "exec sleep 600\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path.string();
}

/// The pid written to `file`, or 0 if none was within `seconds`.
inline int pid_written_to(const std::filesystem::path& file, double seconds) {
  if (!wait_for([&] { return std::filesystem::exists(file) && std::filesystem::file_size(file) > 0; }, seconds))
    return 0;
  int pid = 0;
  std::ifstream(file) >> pid;
  return pid;
}

/// The pid the stand-in python of `dir` wrote once running, or 0 if it wrote none within `seconds`.
inline int stand_in_python_pid(const std::filesystem::path& dir, double seconds) {
  return pid_written_to(dir / "python.pid", seconds);
}

/// The state letter and parent of process `pid` from /proc/PID/stat ("pid (name) STATE PPID ..."),
/// or {'\0', 0} where there is none.
inline std::pair<char, pid_t> process_state_and_parent(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto name_end = stat.rfind(')');
  if (name_end == std::string::npos || name_end + 2 >= stat.size()) return {'\0', 0};
  pid_t parent = 0;
  std::sscanf(stat.c_str() + name_end + 2, "%*c %d", &parent);
  return {stat[name_end + 2], parent};
}

/// Whether `pid` is a process that still runs: neither gone nor a zombie (an
/// orphan's new parent, such as a container's first process, may never reap it).
inline bool process_running(pid_t pid) { return ::kill(pid, 0) == 0 && process_state_and_parent(pid).first != 'Z'; }

/// Whether Slurm's commands reach a cluster with a node that takes jobs here
/// (scripts/slurm-local.sh start, then SLURM_CONF). A node busy with another
/// suite's jobs (ctest -j2 runs SlurmCluster beside DataParallel) counts: a
/// job queues until its CPUs are free, where asking for an idle node made the
/// test skip whenever the other suite held it. Asked once per test process, for
/// at most 20 s: sinfo retries a controller that does not answer (a SLURM_CONF
/// left from a cluster that is gone) for about a minute.
inline bool slurm_cluster_up() {
  static const bool up = [] {
    std::string out;
    if (posenc::run_command({"timeout", "20", "sinfo", "-h", "-o", "%T"}, out) != 0) return false;
    for (const char* state : {"idle", "mixed", "allocated", "completing"})
      if (out.find(state) != std::string::npos) return true;
    return false;
  }();
  return up;
}

}  // namespace posenc::testing
