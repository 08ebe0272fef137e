// A long-lived `python3 scripts/bench_eager.py --serve` child: one JSON request
// line in, one JSON answer line out. posenc bench alternates it with the C++
// side case by case, so that both are measured in the same minute of a shared,
// noisy machine.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace posenc {

class PythonWorker {
 public:
  /// Starts `python script --serve`; throws std::runtime_error if it cannot.
  PythonWorker(const std::string& python, const std::string& script);
  ~PythonWorker();
  PythonWorker(const PythonWorker&) = delete;
  PythonWorker& operator=(const PythonWorker&) = delete;

  /// Sends one request and waits for its answer; throws std::runtime_error
  /// (naming the worker's exit) if it died or answered something unreadable,
  /// and Interrupted if a stop is asked for while it waits.
  nlohmann::json ask(const nlohmann::json& request);

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  int from_ = -1;  ///< the worker's stdout, read directly so that a wait can be given up
};

}  // namespace posenc
