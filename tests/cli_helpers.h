// Running the posenc binary from a test: exit code and combined output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace posenc::testing {

struct CliRun {
  int code;
  std::string output;
};

/// Runs `posenc ARGS` (stdout and stderr together).
inline CliRun run_cli(const std::string& args) {
  const std::string cmd = std::string(POSENC_BINARY) + " " + args + " 2>&1";
  CliRun r{0, ""};
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace posenc::testing
