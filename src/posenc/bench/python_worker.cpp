#include "posenc/bench/python_worker.h"

#include "posenc/environment.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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
  from_ = ::fdopen(out[0], "r");
}

PythonWorker::~PythonWorker() {
  if (to_) std::fclose(to_);  // end of input: the worker returns
  if (from_) std::fclose(from_);
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

nlohmann::json PythonWorker::ask(const nlohmann::json& request) {
  const std::string line = request.dump() + "\n";
  if (std::fputs(line.c_str(), to_) < 0 || std::fflush(to_) != 0)
    throw std::runtime_error("the PyTorch worker is gone (writing its request failed)");
  std::string answer;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, from_)) {
    answer += buf;
    if (!answer.empty() && answer.back() == '\n') break;
  }
  if (answer.empty()) {
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
