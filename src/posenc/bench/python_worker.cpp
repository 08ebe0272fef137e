#include "posenc/bench/python_worker.h"

#include "posenc/environment.h"
#include "posenc/util/interrupt.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace posenc {

PythonWorker::PythonWorker(const std::string& python, const std::string& script) {
  int in[2], out[2];  // in: we write, the child reads; out: the child writes, we read
  if (::pipe(in) != 0 || ::pipe(out) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
  std::vector<std::string> args = {python, script, "--serve"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The twin runs on this CPU: it gets the OpenBLAS kernels posenc switched to, if it did.
  std::vector<std::string> variables;
  for (char** v = environ; *v; ++v) variables.emplace_back(*v);
  if (!replaced_blas_kernels().empty()) variables.push_back("OPENBLAS_CORETYPE=" + blas_kernels());
  std::vector<char*> envp;
  for (auto& v : variables) envp.push_back(v.data());
  envp.push_back(nullptr);
  const int rc = posix_spawnp(&pid_, python.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw std::runtime_error("could not start " + python + " " + script + ": " + std::strerror(rc));
  }
  to_ = ::fdopen(in[1], "w");
  from_ = out[0];
}

PythonWorker::~PythonWorker() {
  // After a stop the worker may be inside a case of thousands of steps: it is
  // ended, not waited for. Otherwise the end of its input makes it return.
  if (pid_ > 0 && interrupt_signal() != 0) ::kill(pid_, SIGTERM);
  if (to_) std::fclose(to_);
  if (from_ >= 0) ::close(from_);
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

nlohmann::json PythonWorker::ask(const nlohmann::json& request) {
  const std::string line = request.dump() + "\n";
  if (std::fputs(line.c_str(), to_) < 0 || std::fflush(to_) != 0)
    throw std::runtime_error("the PyTorch worker is gone (writing its request failed)");
  // Waits for the answer line a fifth of a second at a time, so that a stop
  // (SIGINT/SIGTERM to posenc alone, as `timeout` sends it) is not held up by
  // the worker's case.
  std::string answer;
  char buf[4096];
  while (answer.empty() || answer.back() != '\n') {
    throw_if_interrupted();
    pollfd ready{from_, POLLIN, 0};
    const int n = ::poll(&ready, 1, 200);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("waiting for the PyTorch worker: ") + std::strerror(errno));
    if (n == 0) continue;
    const ssize_t got = ::read(from_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // the worker closed its output: it ended
    answer.append(buf, static_cast<size_t>(got));
  }
  if (answer.empty() || answer.back() != '\n') {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    throw std::runtime_error("the PyTorch worker ended without an answer (exit status " +
                             std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "; its error is above)");
  }
  try {
    return nlohmann::json::parse(answer);
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error("the PyTorch worker answered something that is not JSON: " + answer.substr(0, 200));
  }
}

}  // namespace posenc
