// The fork server that runs the suite's posenc commands (posenc/util/fork_server.h,
// tests/fork_client.h): a command run on it must do what the same command
// started through the shell does.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "cli_helpers.h"
#include "reliability_helpers.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using posenc::testing::plain_shell_words;
using posenc::testing::run_cli_forked;
using posenc::testing::run_cli_in_shell;
using posenc::testing::Scratch;
using Words = std::vector<std::string>;

#define SKIP_WITHOUT_FORK_SERVER()                                                        \
  if (const char* v = std::getenv("POSENC_TEST_FORK_SERVER"); v && std::string(v) == "0") \
  GTEST_SKIP() << "POSENC_TEST_FORK_SERVER=0 turned the fork server off"

TEST(ForkServer, SplitsWordsAsTheShellDoesOrLeavesThemToIt) {
  EXPECT_EQ(plain_shell_words("train  a.json --set x=1\t--out b"),
            (Words{"train", "a.json", "--set", "x=1", "--out", "b"}));
  EXPECT_EQ(plain_shell_words("--input \"jump twice\" --target '' x'y z'\"w\""),
            (Words{"--input", "jump twice", "--target", "", "xy zw"}));
  EXPECT_EQ(plain_shell_words(""), Words{});
  EXPECT_EQ(plain_shell_words("--prompt \"50%\""), (Words{"--prompt", "50%"}));
  // What the shell would expand, redirect or run is left to the shell.
  for (const char* line : {"a | b", "a > f", "a; b", "a && b", "$HOME", "\"$HOME\"", "`id`", "\"a\\\"b\"", "*.json",
                           "a?", "[ab]", "~/x", "a\\ b", "'open", "\"open", "(a)", "a # comment", "a\nb"})
    EXPECT_FALSE(plain_shell_words(line).has_value()) << line;
}

TEST(ForkServer, AnswersAsTheShellStartedPosencDoes) {
  SKIP_WITHOUT_FORK_SERVER();
  Scratch s("forkserver_same");
  const std::string missing = s.path("missing.json");
  // Success, a refused command, a refused flag, a refused file: the same exit code and output.
  for (const std::string& line :
       {std::string("--version"), std::string("frobnicate"), std::string("train --bogus-flag"),
        "train " + missing + " --out " + s.path("run"), std::string("list --markdown")}) {
    const auto forked = run_cli_forked(line, "");
    ASSERT_TRUE(forked.has_value()) << line;
    const auto shell = run_cli_in_shell(line);
    EXPECT_EQ(forked->first, shell.code) << line;
    EXPECT_EQ(forked->second, shell.output) << line;
  }
}

TEST(ForkServer, GivesTheChildTheCallersDirectoryAndEnvironment) {
  SKIP_WITHOUT_FORK_SERVER();
  Scratch s("forkserver_where");
  const std::string config = posenc::testing::write_config(
      s, "tiny.json",
      {"train.steps=2", "train.eval_every=2", "train.val_samples=8", "eval.lengths=[8]", "eval.samples_per_length=8"});
  const auto before = std::filesystem::current_path();
  std::filesystem::current_path(s.dir);
  const auto relative = run_cli_forked("train " + config + " --out relative_run --no-progress", "");
  // The first write fails where the caller's environment says so, through an assignment...
  const auto failing = run_cli_forked("train " + config + " --out failing_run --no-progress", "POSENC_FAIL_WRITE=1");
  // ...or through the caller's own environment, read at each command.
  ::setenv("POSENC_FAIL_WRITE", "1", 1);
  const auto failing_too = run_cli_forked("train " + config + " --out failing_too --no-progress", "");
  ::unsetenv("POSENC_FAIL_WRITE");
  std::filesystem::current_path(before);
  ASSERT_TRUE(relative && failing && failing_too);
  EXPECT_EQ(relative->first, 0) << relative->second;
  EXPECT_TRUE(std::filesystem::exists(s.dir / "relative_run" / "checkpoint.pt")) << relative->second;
  EXPECT_EQ(failing->first, posenc::kExitFailure) << failing->second;
  EXPECT_NE(failing->second.find("cannot write"), std::string::npos) << failing->second;
  EXPECT_EQ(failing_too->first, posenc::kExitFailure) << failing_too->second;
}

TEST(ForkServer, RefusesAnotherChoiceOfKernels) {
  SKIP_WITHOUT_FORK_SERVER();
  // OpenBLAS chose its kernels when the server loaded it: a command that asks
  // for others is started through the shell instead.
  const char* current = std::getenv("OPENBLAS_CORETYPE");
  const std::string other = current && std::string(current) == "Nehalem" ? "Prescott" : "Nehalem";
  EXPECT_FALSE(run_cli_forked("--version", "OPENBLAS_CORETYPE=" + other).has_value());
  EXPECT_FALSE(run_cli_forked("--version", "ATEN_CPU_CAPABILITY=bogus").has_value());
  EXPECT_TRUE(run_cli_forked("--version", "POSENC_ANYTHING=1").has_value());
  const auto r = posenc::testing::run_cli("--version", "OPENBLAS_CORETYPE=" + other);  // through the shell
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(ForkServer, EndsACommandAtItsTimeoutAsTimeoutDoes) {
  SKIP_WITHOUT_FORK_SERVER();
  Scratch s("forkserver_timeout");
  const std::string config = posenc::testing::write_config(s, "long.json", {"train.steps=1000000"});
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_cli_forked("train " + config + " --out " + s.path("run") + " --no-progress", "timeout 2");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, 124) << r->second;
  // SIGTERM is a stop request: the run saves its step and says so.
  EXPECT_NE(r->second.find("stop"), std::string::npos) << r->second;
  EXPECT_LT(seconds, 120.0);
  // A prefix that is neither assignments nor `timeout N` is the shell's.
  EXPECT_FALSE(run_cli_forked("--version", "timeout -k 5 2").has_value());
  EXPECT_FALSE(run_cli_forked("--version", "nice").has_value());
}

}  // namespace POSENC_TEST_UNIT
