// The test process's end of posenc's fork server (posenc/util/fork_server.h):
// run_cli sends a command to a posenc that loaded LibTorch once, instead of
// starting a new one at about a CPU-second each. A command line that needs a
// shell (a pipe, a variable, a glob, a prefix other than VAR=value or
// `timeout N`) is left to the shell, as is every command while the server
// cannot run it. POSENC_TEST_FORK_SERVER=0 turns the server off.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "posenc/util/fork_server.h"
#include "posenc/util/process.h"

extern char** environ;

namespace posenc::testing {

/// The words of `line` as sh would split them, where that needs no expansion:
/// plain words, '...' and "..." without $, ` or \ inside. std::nullopt for
/// anything else (a metacharacter, a glob, a variable, an escape).
inline std::optional<std::vector<std::string>> plain_shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else if (c == '\'' || c == '"') {
      const size_t end = line.find(c, i + 1);
      if (end == std::string::npos) return std::nullopt;
      const std::string quoted = line.substr(i + 1, end - i - 1);
      if (c == '"' && quoted.find_first_of("$`\\") != std::string::npos) return std::nullopt;
      word += quoted;
      in_word = true;
      i = end;
    } else if (std::strchr("|&;<>()$`\\*?[]{}~#!\n", c)) {
      return std::nullopt;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

/// The server of this test process, started at its first use.
class ForkServer {
 public:
  static ForkServer& instance() {
    static ForkServer server;
    return server;
  }

  /// Runs posenc with `args` (without argv[0]), `extra_environment` (NAME=value)
  /// added to this process's, and a timeout(1) of `timeout_s` if not 0; the
  /// exit code as sh reports it (128 + signal for a killed child, 124 for a
  /// timeout) and the output. std::nullopt where the server cannot run it.
  std::optional<std::pair<int, std::string>> run(const std::vector<std::string>& args,
                                                 const std::vector<std::string>& extra_environment,
                                                 unsigned timeout_s) {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock() || !started()) return std::nullopt;  // another thread's command: the shell runs this one
    posenc::ForkRequest request;
    request.argv.push_back(POSENC_BINARY);
    request.argv.insert(request.argv.end(), args.begin(), args.end());
    for (char** e = environ; *e; ++e) request.environment.emplace_back(*e);
    for (const auto& entry : extra_environment) {
      const std::string name = entry.substr(0, entry.find('=') + 1);
      auto& env = request.environment;
      env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(name, 0) == 0; }),
                env.end());
      env.push_back(entry);
    }
    request.directory = std::filesystem::current_path().string();
    request.timeout_s = timeout_s;
    posenc::caller_signal_state(request);
    const auto run = posenc::run_on_fork_server(socket_, request);
    if (!run) return std::nullopt;
    return std::make_pair(run->timed_out ? 124 : posenc::shell_exit_code(run->status), run->output);
  }

  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

 private:
  ForkServer() = default;
  ~ForkServer() {
    if (pid_ <= 0 || ::getpid() != owner_) return;  // a forked copy of the test process leaves it alone
    ::kill(pid_, SIGKILL);  // it may ignore SIGTERM: it inherited what this process ignored when it started it
    ::waitpid(pid_, nullptr, 0);
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }

  /// Whether the server listens, starting it the first time.
  bool started() {
    if (tried_) return pid_ > 0;
    tried_ = true;
    const char* off = std::getenv("POSENC_TEST_FORK_SERVER");
    if (off && std::string(off) == "0") return false;
    char directory[] = "/tmp/posenc-fork-XXXXXX";
    if (!::mkdtemp(directory)) return false;
    directory_ = directory;
    socket_ = directory_ + "/socket";
    owner_ = ::getpid();
    // Made before fork: the child of a process with threads may only exec.
    std::vector<std::string> environment = {std::string(posenc::kForkServerVariable) + "=" + socket_};
    for (char** e = environ; *e; ++e) environment.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    char* const argv[] = {const_cast<char*>(POSENC_BINARY), nullptr};
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execve(POSENC_BINARY, argv, envp.data());
      ::_exit(127);
    }
    if (pid < 0) return false;
    pid_ = pid;
    // Listening once LibTorch has loaded: about a second; a server that exits is an old binary or a broken one.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::filesystem::exists(socket_)) return true;
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return false;
  }

  std::mutex mutex_;
  bool tried_ = false;
  pid_t pid_ = -1;
  pid_t owner_ = -1;
  std::string directory_;
  std::string socket_;
};

/// `posenc ARGS` with the shell prefix `variables` (VAR=value ... or `timeout N`)
/// on the fork server; std::nullopt where that needs the shell or the server cannot.
inline std::optional<std::pair<int, std::string>> run_cli_forked(const std::string& args,
                                                                 const std::string& variables) {
  const auto words = plain_shell_words(args);
  const auto prefix = plain_shell_words(variables);
  if (!words || !prefix) return std::nullopt;
  std::vector<std::string> environment;
  unsigned timeout_s = 0;
  if (prefix->size() == 2 && (*prefix)[0] == "timeout" &&
      std::all_of((*prefix)[1].begin(), (*prefix)[1].end(), [](char c) { return std::isdigit(c); })) {
    timeout_s = static_cast<unsigned>(std::stoul((*prefix)[1]));
  } else {
    for (const auto& word : *prefix) {
      const size_t eq = word.find('=');
      const bool assignment =
          eq != std::string::npos && eq > 0 && !std::isdigit(word[0]) &&
          std::all_of(word.begin(), word.begin() + eq, [](char c) { return std::isalnum(c) || c == '_'; });
      if (!assignment) return std::nullopt;  // a command such as `timeout -k 60 ...`
      environment.push_back(word);
    }
  }
  return ForkServer::instance().run(*words, environment, timeout_s);
}

}  // namespace posenc::testing
