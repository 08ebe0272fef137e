// compare on Slurm: the array scripts, and a grid taken through --slurm,
// --status, the array tasks (run by bash as Slurm would, one stopped by SIGTERM
// and requeued) and --collect, with stand-ins for sbatch, squeue and scontrol
// that record what they are asked. A real one-node cluster is not needed.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/errors.h"
#include "posenc/experiments/slurm.h"
#include "posenc/util/io.h"
#include "posenc/util/process.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::error_of;
using posenc::testing::expect_one_line_error;
using posenc::testing::run_cli;
using posenc::testing::Scratch;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Fake sbatch (job ids 4242, 4243, ... and the scripts it got), squeue (prints
/// the file `queue`) and scontrol (MaxArraySize 3; requeues recorded), first on PATH.
struct FakeSlurm {
  const Scratch& s;
  std::string old_path;
  explicit FakeSlurm(const Scratch& scratch) : s(scratch), old_path(std::getenv("PATH")) {
    const fs::path bin = s.dir / "bin";
    fs::create_directories(bin);
    const std::string d = s.dir.string();
    write_tool("sbatch", "n=$(cat " + d + "/next 2>/dev/null || echo 4242); echo $((n + 1)) > " + d +
                             "/next; echo \"$@\" >> " + d + "/sbatch.calls; echo $n");
    write_tool("squeue", "cat " + d + "/queue 2>/dev/null; exit 0");
    write_tool("scontrol", "if [ \"$1\" = show ]; then echo 'MaxArraySize            = 3'; else echo \"$@\" >> " + d +
                               "/scontrol.calls; fi");
    ::setenv("PATH", (bin.string() + ":" + old_path).c_str(), 1);
  }
  ~FakeSlurm() { ::setenv("PATH", old_path.c_str(), 1); }
  void write_tool(const std::string& name, const std::string& body) {
    const fs::path p = s.dir / "bin" / name;
    write_file_atomic(p.string(), "#!/bin/sh\n" + body + "\n");
    fs::permissions(p, fs::perms::owner_all);
  }
  void queue(const std::string& lines) { write_file_atomic(s.path("queue"), lines); }
};

/// Runs an array script as Slurm would run task `index` of job `job`; returns its pid.
pid_t start_task(const std::string& script, int index, const std::string& job, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("SLURM_ARRAY_TASK_ID", std::to_string(index).c_str(), 1);
    ::setenv("SLURM_ARRAY_JOB_ID", job.c_str(), 1);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execl("/bin/bash", "bash", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST(SlurmScript, OneArrayTaskPerRunWithThrottleGraceSignalAndRequeue) {
  ArraySpec a;
  a.job_name = "posenc-grid";
  a.run_ids = {"rope-projected-max-s0", "rope-projected-max-s1", "alibi-projected-max-s0", "it's"};
  a.throttle = 2;
  a.cpus_per_task = 3;
  a.log_dir = "/shared/out/logs";
  a.workdir = "/shared/work dir";
  a.task_command = {"/opt/posenc", "compare", "/shared/grid.json", "--run"};
  SlurmSettings s;
  s.partition = "short";
  s.time = "1:00:00";
  s.gpus_per_task = 1;
  s.sbatch = {"--qos=low"};
  const std::string script = array_script(a, s);
  for (const char* line :
       {"#SBATCH --array=0-3%2\n", "#SBATCH --cpus-per-task=3\n", "#SBATCH --signal=B:USR1@120\n",
        "#SBATCH --requeue\n", "#SBATCH --output=/shared/out/logs/slurm-%A_%a.log\n", "#SBATCH --partition=short\n",
        "#SBATCH --time=1:00:00\n", "#SBATCH --gpus-per-task=1\n", "#SBATCH --qos=low\n", "'it'\\''s'",
        "cd '/shared/work dir' || exit 1", "'/opt/posenc' 'compare' '/shared/grid.json' '--run' \"$run\"",
        "scontrol requeue \"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\""})
    EXPECT_TRUE(contains(script, line)) << line << " missing from:\n" << script;
  EXPECT_FALSE(contains(script, "--account"));
  // bash accepts it.
  Scratch dir("slurmscript");
  write_file_atomic(dir.path("a.sh"), script);
  EXPECT_EQ(std::system(("bash -n " + dir.path("a.sh")).c_str()), 0);

  EXPECT_EQ(split_into_arrays({"a", "b", "c", "d", "e"}, 2),
            (std::vector<std::vector<std::string>>{{"a", "b"}, {"c", "d"}, {"e"}}));
}

// Slurm's time formats, and a limit that leaves nothing before the grace
// signal refused: each segment would be stopped as it starts.
TEST(SlurmScript, RanksPerRunStartWithSrunAndAreStoppedThroughScancel) {
  ArraySpec a;
  a.job_name = "posenc-grid";
  a.run_ids = {"r0"};
  a.cpus_per_task = 2;
  a.log_dir = "/runs/logs";
  a.workdir = "/runs";
  a.task_command = {"/bin/posenc", "compare", "/g.json", "--run"};
  SlurmSettings settings;
  const std::string one = array_script(a, settings);
  EXPECT_TRUE(contains(one, "#SBATCH --ntasks=1\n")) << one;
  EXPECT_FALSE(contains(one, "srun")) << one;
  EXPECT_TRUE(contains(one, "kill -TERM \"$child\"")) << one;
  settings.ntasks_per_run = 4;
  const std::string four = array_script(a, settings);
  EXPECT_TRUE(contains(four, "#SBATCH --ntasks=4\n")) << four;
  EXPECT_TRUE(contains(four, "srun --ntasks=4 --cpus-per-task=2 --kill-on-bad-exit=0 '/bin/posenc' 'compare'")) << four;
  EXPECT_TRUE(contains(four, "scancel --signal=TERM \"$SLURM_JOB_ID\"")) << four;
  EXPECT_FALSE(contains(four, "kill -TERM \"$child\"")) << "a SIGTERM to srun cancels the step:\n" << four;
  // The grid's block and the flag; a batch the ranks cannot share is refused before anything is written.
  EXPECT_EQ(read_slurm_settings(json{{"ntasks_per_run", 2}}, "g.json.slurm").ntasks_per_run, 2);
  for (const json& bad : {json(0), json(2.5), json("2"), json(2000)})
    EXPECT_THROW(read_slurm_settings(json{{"ntasks_per_run", bad}}, "g.json.slurm"), ConfigError) << bad;
  EXPECT_THROW(read_slurm_settings(json{{"sbatch", {"--ntasks=2"}}}, "g.json.slurm"), ConfigError);
  Scratch s("slurmranks_batch");
  json grid = posenc::testing::tiny_grid();
  grid["set"]["train.batch_size"] = 30;
  grid["slurm"] = {{"ntasks_per_run", 4}};
  write_file_atomic(s.path("grid.json"), grid.dump());
  const auto r = run_cli("compare " + s.path("grid.json") + " --out " + s.path("out") + " --slurm --no-progress");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "ntasks_per_run=4: run none-projected-max-s0 has train.batch_size=30");
  EXPECT_FALSE(fs::exists(s.path("out") + "/slurm")) << "nothing written";
  // The flag wins over the block (and is checked the same way).
  const auto flag = run_cli("compare " + s.path("grid.json") + " --out " + s.path("out") +
                            " --slurm --ntasks-per-run 7 --no-progress");
  EXPECT_EQ(flag.code, 2) << flag.output;
  expect_one_line_error(flag.output, "ntasks_per_run=7: run none-projected-max-s0 has train.batch_size=30");
}

TEST(SlurmScript, ATimeLimitMustLeaveTimeBeforeTheGraceSignal) {
  using posenc::slurm_time_seconds;
  EXPECT_EQ(slurm_time_seconds("90"), 90 * 60);
  EXPECT_EQ(slurm_time_seconds("2:30"), 2 * 60 + 30);
  EXPECT_EQ(slurm_time_seconds("1:00:00"), 3600);
  EXPECT_EQ(slurm_time_seconds("1-0"), 86400);
  EXPECT_EQ(slurm_time_seconds("1-2:03"), 86400 + 2 * 3600 + 3 * 60);
  EXPECT_EQ(slurm_time_seconds("0-0:01:30"), 90);
  EXPECT_EQ(slurm_time_seconds("UNLIMITED"), -1);
  EXPECT_EQ(error_of([] { posenc::check_time_beyond_grace("2", "--time"); }),
            "--time=2 is 120 s, not more than the 120 s before the time limit at which Slurm signals each run to "
            "checkpoint: every segment would be stopped as it starts; give more time (e.g. 1:00:00)");
  EXPECT_NE(error_of([] {
              posenc::check_time_beyond_grace("0:01:30", "g.json.slurm.time");
            }).find("g.json.slurm.time=0:01:30 is 90 s"),
            std::string::npos);
  EXPECT_EQ(error_of([] { posenc::check_time_beyond_grace("2:01", "--time"); }), "(no error)");
  EXPECT_EQ(error_of([] { posenc::check_time_beyond_grace("infinite", "--time"); }), "(no error)");
}

TEST(SlurmScript, TheGridsSlurmBlockIsCheckedLikeAnyConfig) {
  const auto settings = read_slurm_settings(
      {{"partition", "gpu"}, {"time", "4:00:00"}, {"gpus_per_task", 1}, {"sbatch", {"--qos=low"}}}, "g.json.slurm");
  EXPECT_EQ(settings.partition, "gpu");
  EXPECT_EQ(settings.gpus_per_task, 1);
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"partiton", "gpu"}}, "g.json.slurm");
                       }),
                       "g.json.slurm.partiton: unknown key"));
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"time", "1:00\n#SBATCH --x"}}, "g.json.slurm");
                       }),
                       "g.json.slurm.time: must be one line"));
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"gpus_per_task", "1"}}, "g.json.slurm");
                       }),
                       "g.json.slurm.gpus_per_task: expected an integer"));
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"sbatch", {"qos=low"}}}, "g.json.slurm");
                       }),
                       "expected an sbatch option"));
  // What posenc writes itself (the array, its logs, its requeue) cannot be given again.
  for (const std::string own : {"--array=0-99", "-a 0-99", "--output=x.log", "-o x.log", "--wrap=true",
                                "--signal=B:USR1", "--requeue", "--open-mode=truncate"}) {
    const std::string e = error_of([&] { read_slurm_settings({{"sbatch", {own}}}, "g.json.slurm"); });
    EXPECT_TRUE(contains(e, "is set by posenc itself")) << own << ": " << e;
  }
  EXPECT_NO_THROW(read_slurm_settings({{"sbatch", {"--qos=low", "--exclusive", "--mem=8G"}}}, "g.json.slurm"));
  // "sbatch" is a list of strings, at most 64 of them.
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"sbatch", "--qos=low"}}, "g.json.slurm");
                       }),
                       "g.json.slurm.sbatch: expected an array of strings"));
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"sbatch", {"--qos=low", 7}}}, "g.json.slurm");
                       }),
                       "g.json.slurm.sbatch[1]: expected a string, got 7"));
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"sbatch", std::vector<std::string>(65, "--exclusive")}}, "g.json.slurm");
                       }),
                       "g.json.slurm.sbatch: expected an array of at most 64 strings, got 65"));
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"slurm", 1}}, "g.json.slurm");
                       }),
                       "g.json.slurm.slurm: unknown key"));
  EXPECT_TRUE(contains(error_of([] {
                         read_slurm_settings({{"partition", std::string("gpu\0x", 5)}}, "g.json.slurm");
                       }),
                       "g.json.slurm.partition: holds a control character (byte 0)"));
}

// The flags that stand for the block's keys are checked by the same
// declaration, win over the block, and can set what the block can (0 GPUs).
TEST(SlurmGrid, TheClusterFlagsAreCheckedAsTheBlocksKeysAreAndWinOverThem) {
  Scratch s("slurmflags");
  const std::string old_path = std::getenv("PATH");
  fs::create_directories(s.dir / "empty");
  json grid = posenc::testing::tiny_grid();
  grid["slurm"] = {{"partition", "gpu"}, {"gpus_per_task", 2}, {"sbatch", {"--qos=low"}}};
  write_file_atomic(s.path("grid.json"), grid.dump());
  const std::string compare = "compare " + s.path("grid.json") + " --out " + s.path("out") + " --slurm --no-progress ";
  const auto submit = [&](const std::string& flags) {
    ::setenv("PATH", (s.dir / "empty").c_str(), 1);  // no sbatch: the script is written and the command shown
    const auto r = run_cli(compare + flags);
    ::setenv("PATH", old_path.c_str(), 1);
    return r;
  };
  // What the block refuses, the flag refuses, before anything is written.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--sbatch=--output=/tmp/x.log", "--sbatch=--output=/tmp/x.log: --output is set by posenc itself"},
      {"--sbatch=--array=0-3", "--array is set by posenc itself"},
      {"--sbatch=-n4", "--sbatch=-n4: -n4 is set by posenc itself"},
      {"--sbatch=qos=low", "expected an sbatch option such as --qos=low"},
      {"'--partition=a\tb'", "--partition: holds a control character (byte 9)"},
      {"'--account=x\r'", "--account: must be one line"},
      {"--time=2", "--time=2 is 120 s"},
      {"--gpus-per-task 65", "65 is out of range [0, 64]"},
      {"--ntasks-per-run 0", "0 is out of range [1, 1024]"},
  };
  for (const auto& [flags, message] : refused) {
    const auto r = submit(flags);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.output;
    EXPECT_TRUE(contains(r.output, message)) << flags << ": " << r.output;
    EXPECT_FALSE(fs::exists(s.path("out") + "/slurm")) << flags << ": nothing written";
  }
  // The flags win over the block; --gpus-per-task 0 takes the block's GPUs away; --sbatch adds.
  const auto r = submit("--partition=short --gpus-per-task 0 --sbatch=--mem=8G");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string script = read_file(s.path("out") + "/slurm/array-0.sh");
  EXPECT_TRUE(contains(script, "#SBATCH --partition=short\n")) << script;
  EXPECT_FALSE(contains(script, "--partition=gpu")) << script;
  EXPECT_FALSE(contains(script, "--gpus-per-task")) << script;
  EXPECT_TRUE(contains(script, "#SBATCH --qos=low\n#SBATCH --mem=8G\n")) << script;
  // Without the flags, the block's values.
  fs::remove_all(s.path("out"));
  ASSERT_EQ(submit("").code, 0);
  const std::string block = read_file(s.path("out") + "/slurm/array-0.sh");
  EXPECT_TRUE(contains(block, "#SBATCH --partition=gpu\n")) << block;
  EXPECT_TRUE(contains(block, "#SBATCH --gpus-per-task=2\n")) << block;
}

// sbatch without --parsable (a site's wrapper drops it) says "Submitted batch
// job N": that is a submission, recorded, not a failure.
TEST(SlurmGrid, SbatchOutputWithoutParsableIsASubmission) {
  Scratch s("slurmplain");
  FakeSlurm slurm(s);
  slurm.write_tool("sbatch", "echo 'Submitted batch job 4242'");
  EXPECT_EQ(submit_with_sbatch(s.path("a.sh")), "4242");
  slurm.write_tool("sbatch", "echo 'Submitted batch job 4243 on cluster c1'");
  EXPECT_EQ(submit_with_sbatch(s.path("a.sh")), "4243");
  slurm.write_tool("sbatch", "echo 'sbatch: error: invalid partition'; exit 1");
  EXPECT_TRUE(contains(error_of([&] { submit_with_sbatch(s.path("a.sh")); }), "invalid partition"));
}

TEST(SlurmGrid, SubmittedArraysRunResumeAfterSigtermAndAreCollected) {
  Scratch s("slurmgrid");
  FakeSlurm slurm(s);
  json grid = posenc::testing::tiny_grid();
  grid["seeds"] = {0, 1};
  grid["set"]["train.steps"] = 300;
  grid["set"]["train.eval_every"] = 300;
  grid["set"]["train.checkpoint_every"] = 50;
  grid["slurm"] = {{"partition", "debug"}};
  write_file_atomic(s.path("grid.json"), grid.dump());
  const std::string out = s.path("out"), compare = "compare " + s.path("grid.json") + " --out " + out;

  // Four runs, MaxArraySize 3: two arrays, each submitted; the job ids are recorded.
  auto r = run_cli(compare + " --slurm --jobs 2 --time 0:30:00 --no-progress");
  ASSERT_EQ(r.code, 0) << r.output;
  const json jobs = read_json_file(out + "/slurm/jobs.json");
  ASSERT_EQ(jobs["arrays"].size(), 2u);
  EXPECT_EQ(jobs["arrays"][0]["job_id"], "4242");
  EXPECT_EQ(jobs["arrays"][1]["job_id"], "4243");
  EXPECT_EQ(jobs["arrays"][0]["runs"].size(), 3u);
  const std::string first = jobs["arrays"][0]["script"], second = jobs["arrays"][1]["script"];
  const std::string script = read_file(first);
  for (const char* line : {"#SBATCH --array=0-2%2", "#SBATCH --partition=debug", "#SBATCH --time=0:30:00"})
    EXPECT_TRUE(contains(script, line)) << line << "\n" << script;
  // --jobs 2 holds for the grid: the second array starts once the first has ended.
  EXPECT_FALSE(contains(script, "--dependency")) << script;
  EXPECT_TRUE(contains(read_file(second), "#SBATCH --array=0-0%2\n")) << read_file(second);
  EXPECT_TRUE(contains(read_file(second), "#SBATCH --dependency=afterany:4242\n")) << read_file(second);
  EXPECT_TRUE(contains(r.output, "job 4243, to start once job 4242 has ended")) << r.output;
  EXPECT_TRUE(fs::is_directory(out + "/logs"));  // Slurm does not make --output's directory

  // While a task is queued, neither a local compare nor a second submission starts anything.
  slurm.queue("4242_0 RUNNING\n4242_1 PENDING\n4242_2 PENDING\n4243_0 PENDING\n");
  r = run_cli(compare + " --no-progress");
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "4 Slurm array task(s) of job 4242, 4243 still pending or running");
  EXPECT_EQ(run_cli(compare + " --slurm --no-progress").code, 2);
  r = run_cli(compare + " --status");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "RUNNING (job 4242_0)")) << r.output;
  EXPECT_TRUE(contains(r.output, "3 pending, 1 starting")) << r.output;

  // Task 0: stopped by the SIGTERM Slurm sends before the time limit; it checkpoints and requeues itself.
  const std::string run0 = jobs["arrays"][0]["runs"][0];
  const fs::path dir0 = fs::path(out) / "runs" / run0;
  pid_t pid = start_task(first, 0, "4242", s.path("task0.log"));
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(dir0 / "checkpoint.pt") && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(dir0 / "checkpoint.pt"));
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 143) << read_file(s.path("task0.log"));
  EXPECT_FALSE(fs::exists(dir0 / "results.json"));
  EXPECT_TRUE(contains(read_file(s.path("scontrol.calls")), "requeue 4242_0"));
  slurm.queue("");
  r = run_cli(compare + " --status");
  EXPECT_TRUE(contains(r.output, "stopped")) << r.output;

  // Every task, as the scheduler runs them; task 0 again, as requeued, resumes.
  const std::vector<std::tuple<std::string, int, std::string>> tasks = {
      {first, 0, "4242"}, {first, 1, "4242"}, {first, 2, "4242"}, {second, 0, "4243"}};
  for (const auto& [script_path, index, job] : tasks)
    EXPECT_EQ(wait_exit(start_task(script_path, index, job, s.path("tasks.log"))), 0) << read_file(s.path("tasks.log"));
  EXPECT_TRUE(contains(read_file(out + "/logs/" + run0 + ".log"), "resuming"))
      << read_file(out + "/logs/" + run0 + ".log");

  // --collect: every run summarized, nothing trained.
  r = run_cli(compare + " --collect --no-figures --no-progress");
  EXPECT_EQ(r.code, 0) << r.output;
  const json summary = read_json_file(out + "/summary.json");
  EXPECT_TRUE(summary["unfinished"].empty()) << summary.dump();
  size_t seeds = 0;
  for (const auto& v : summary["variants"]) seeds += v["seeds"].size();
  EXPECT_EQ(seeds, 4u);
  r = run_cli(compare + " --status");
  EXPECT_TRUE(contains(r.output, "4 done")) << r.output;
  // A task started again after its run finished has nothing to do.
  EXPECT_EQ(wait_exit(start_task(first, 1, "4242", s.path("again.log"))), 0);
  EXPECT_TRUE(contains(read_file(out + "/logs/" + jobs["arrays"][0]["runs"][1].get<std::string>() + ".log"),
                       "finished already"));
}

// Runs whose array posenc did not get into the queue are "unsubmitted", with
// why, not "pending"; an array the user then submits by hand is followed by
// its script; without --jobs there is no throttle, and the log says so.
TEST(SlurmGrid, AnArrayNotSubmittedSaysWhyAndOneSubmittedByHandIsFollowed) {
  Scratch s("slurmunsubmitted");
  FakeSlurm slurm(s);
  slurm.write_tool("sbatch",
                   "echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2; "
                   "exit 1");
  write_file_atomic(s.path("grid.json"), posenc::testing::tiny_grid().dump());
  const std::string out = s.path("out"), compare = "compare " + s.path("grid.json") + " --out " + out;
  auto r = run_cli(compare + " --slurm --no-progress");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "failed (exit 1): sbatch: error: Batch job submission failed: Invalid partition"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "as many at a time as Slurm allows (--jobs N caps it)")) << r.output;
  const json jobs = read_json_file(out + "/slurm/jobs.json");
  ASSERT_EQ(jobs["arrays"].size(), 1u);
  const std::string script = jobs["arrays"][0]["script"];
  EXPECT_TRUE(contains(read_file(script), "#SBATCH --array=0-1\n")) << "no --jobs, no throttle:\n" << read_file(script);
  r = run_cli(compare + " --status");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "2 unsubmitted")) << r.output;
  EXPECT_TRUE(contains(r.output, "Invalid partition name specified")) << r.output;
  EXPECT_FALSE(contains(r.output, "pending")) << r.output;

  // The user submits the script by hand (job 5000): squeue knows it by its script.
  slurm.queue("5000_0 RUNNING " + script + "\n5000_1 PENDING " + script + "\n");
  r = run_cli(compare + " --status");
  EXPECT_TRUE(contains(r.output, "RUNNING (job 5000_0, submitted by hand)")) << r.output;
  EXPECT_TRUE(contains(r.output, "1 pending, 1 starting")) << r.output;
  r = run_cli(compare + " --no-progress");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "2 Slurm array task(s) of a job submitted by hand (5000) still pending or running");
}

TEST(SlurmGrid, WithoutSbatchTheScriptIsWrittenAndTheCommandShown) {
  Scratch s("slurmnosbatch");
  const std::string old_path = std::getenv("PATH");
  fs::create_directories(s.dir / "empty");
  ::setenv("PATH", (s.dir / "empty").c_str(), 1);  // no sbatch (nor anything else) on PATH
  write_file_atomic(s.path("grid.json"), posenc::testing::tiny_grid().dump());
  const auto r = run_cli("compare " + s.path("grid.json") + " --out " + s.path("out") + " --slurm --no-progress");
  ::setenv("PATH", old_path.c_str(), 1);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "sbatch " + s.path("out") + "/slurm/array-0.sh")) << r.output;
  EXPECT_TRUE(fs::exists(s.path("out") + "/slurm/array-0.sh"));
  ::setenv("PATH", (s.dir / "empty").c_str(), 1);
  const auto status = run_cli("compare " + s.path("grid.json") + " --out " + s.path("out") + " --status");
  ::setenv("PATH", old_path.c_str(), 1);
  EXPECT_TRUE(contains(status.output, "2 unsubmitted")) << status.output;
  EXPECT_TRUE(contains(status.output, "submit it with `sbatch " + s.path("out") + "/slurm/array-0.sh`"))
      << status.output;
  // --slurm needs nothing of a local run; the cluster flags need --slurm.
  EXPECT_EQ(run_cli("compare " + s.path("grid.json") + " --partition x").code, 2);
  EXPECT_EQ(run_cli("compare " + s.path("grid.json") + " --slurm --status").code, 2);
}

// A job that a cluster may requeue runs `train --resume=auto`: the first start
// starts the run, a requeued one continues it. Under Slurm the CPUs the job was
// given (SLURM_CPUS_PER_TASK) are train.threads unless --threads says otherwise.
TEST(SlurmRecipe, ResumeAutoStartsOrContinuesAndThreadsFollowTheCpusGiven) {
  Scratch s("resume_auto");
  const std::string config = posenc::testing::write_config(s, "c.json", {"train.steps=20", "eval.lengths=[8]"});
  const std::string run = s.path("run"), train = "train " + config + " --no-progress --out " + run;
  auto r = run_cli(train + " --resume=auto", "SLURM_CPUS_PER_TASK=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "--resume=auto: no checkpoint in " + run + ": starting the run")) << r.output;
  EXPECT_TRUE(contains(r.output, "train.threads=2 from SLURM_CPUS_PER_TASK")) << r.output;
  EXPECT_EQ(read_json_file(run + "/config.json")["train"]["threads"], 2);
  r = run_cli(train + " --resume=auto --set train.steps=30 --threads 1", "SLURM_CPUS_PER_TASK=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "is there: continuing the run")) << r.output;
  EXPECT_TRUE(contains(r.output, "resuming " + run + " at step 20")) << r.output;
  EXPECT_FALSE(contains(r.output, "from SLURM_CPUS_PER_TASK")) << "--threads decides";
  r = run_cli(train + " --resume=maybe");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "--resume");
  r = run_cli(train + " --resume=auto --set train.steps=30", "SLURM_CPUS_PER_TASK=lots");
  EXPECT_TRUE(contains(r.output, "SLURM_CPUS_PER_TASK=lots is not a count of CPUs")) << r.output;
}

// ---------------------------------------------------------------- a real cluster

namespace {

/// Waits until squeue lists no task of `job` (or `seconds` pass); true if it emptied.
bool wait_for_queue_to_empty(const std::string& job, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::string out;
  while (std::chrono::steady_clock::now() < end) {
    if (posenc::run_command({"squeue", "-h", "-j", job}, out) == 0 && out.find_first_not_of(" \n") == std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return false;
}

/// How many times `what` occurs in `text`.
/// Ends `job` with SIGKILL, which nothing requeues, until it has left the
/// queue (it may be pending between two segments); whether it has.
bool kill_until_gone(const std::string& job) {
  std::string said;
  for (int i = 0; i < 30 && !wait_for_queue_to_empty(job, 2); ++i) {
    posenc::run_command({"scancel", "--signal=KILL", "--full", job}, said);
    posenc::run_command({"scancel", "--state=PENDING", job}, said);
  }
  return wait_for_queue_to_empty(job, 60);
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

/// Waits until `file` holds `what` at least `n` times (or `seconds` pass).
bool wait_for_lines(const std::string& file, const std::string& what, size_t n, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (fs::exists(file) && occurrences(read_file(file), what) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

}  // namespace

// Every way Slurm stops a task: SIGTERM to every process of the job
// (`scancel --full`, as PreemptMode=REQUEUE does) and USR1 to the script (the
// time limit's `--signal=B:USR1@grace`). Each time the run checkpoints, the
// script says what the run wrote and requeues it, and it resumes.
TEST(SlurmCluster, EveryWayTheClusterStopsATaskCheckpointsAndRequeuesIt) {
  if (!posenc::testing::slurm_cluster_up())
    GTEST_SKIP() << "no Slurm cluster here (scripts/slurm-local.sh start, then SLURM_CONF)";
  Scratch s("slurmstops");
  json grid = posenc::testing::tiny_grid();
  grid["schemes"] = {"none"};
  grid["set"]["train.steps"] = 100000000;  // ended below with SIGKILL, which is never requeued
  grid["set"]["train.checkpoint_every"] = 100000000;
  write_file_atomic(s.path("grid.json"), grid.dump());
  const std::string out = s.path("out"), compare = "compare " + s.path("grid.json") + " --out " + out;
  ASSERT_EQ(run_cli(compare + " --slurm --no-progress").code, 0);
  const std::string job = read_json_file(out + "/slurm/jobs.json")["arrays"][0]["job_id"];
  const std::string log = out + "/logs/none-projected-max-s0.log", slurm_log = out + "/logs/slurm-" + job + "_0.log";
  const std::vector<std::vector<std::string>> stops = {{"--signal=TERM", "--full"}, {"--signal=USR1", "--batch"}};
  for (size_t k = 0; k < stops.size(); ++k) {
    SCOPED_TRACE(stops[k][0] + " " + stops[k][1]);
    // This segment trains: its train line is there (after posenc's signal
    // handlers are in), and a step logged after it.
    ASSERT_TRUE(wait_for_lines(log, "train dir=", k + 1, 120)) << run_cli(compare + " --status").output;
    const std::string text = read_file(log);
    const size_t steps_before = occurrences(text.substr(text.rfind("train dir=")), "info step ");
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      const std::string now = read_file(log);
      if (occurrences(now.substr(now.rfind("train dir=")), "info step ") > steps_before) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::string said;
    ASSERT_EQ(posenc::run_command({"scancel", stops[k][0], stops[k][1], job + "_0"}, said), 0) << said;
    EXPECT_TRUE(wait_for_lines(log, "stopped by SIGTERM at step", k + 1, 60)) << read_file(log);
    EXPECT_TRUE(wait_for_lines(slurm_log, "checkpoint written to", k + 1, 60))
        << "the script says what the run wrote:\n"
        << read_file(slurm_log);
  }
  EXPECT_TRUE(wait_for_lines(log, "resuming", stops.size(), 120)) << read_file(log);
  EXPECT_TRUE(kill_until_gone(job)) << run_cli(compare + " --status").output;
}

// A grid row may train data parallel: "ntasks_per_run" ranks per run, started
// by srun. The time limit's USR1 reaches the ranks through scancel (a SIGTERM
// to srun itself would cancel the step): they stop at one step, rank 0
// checkpoints, the task requeues, and both ranks resume and finish the run.
TEST(SlurmCluster, ARunOfTwoRanksStopsAtOneStepRequeuesAndFinishes) {
  POSENC_SKIP_WITHOUT_GLOO();
  if (!posenc::testing::slurm_cluster_up())
    GTEST_SKIP() << "no Slurm cluster here (scripts/slurm-local.sh start, then SLURM_CONF)";
  Scratch s("slurmranks");
  json grid = posenc::testing::tiny_grid();
  grid["schemes"] = {"none"};
  grid["set"]["train.steps"] = 600;  // stopped at step 20 or so; what follows the resume is only waited for
  grid["set"]["train.eval_every"] = 600;
  grid["set"]["train.checkpoint_every"] = 100000;  // only the stop writes one
  grid["slurm"] = {{"ntasks_per_run", 2}};
  write_file_atomic(s.path("grid.json"), grid.dump());
  const std::string out = s.path("out"), compare = "compare " + s.path("grid.json") + " --out " + out;
  ASSERT_EQ(run_cli(compare + " --slurm --no-progress").code, 0);
  const std::string job = read_json_file(out + "/slurm/jobs.json")["arrays"][0]["job_id"];
  const std::string log = out + "/logs/none-projected-max-s0.log", slurm_log = out + "/logs/slurm-" + job + "_0.log";
  ASSERT_TRUE(wait_for_lines(log, "info step ", 2, 120)) << run_cli(compare + " --status").output;
  EXPECT_TRUE(contains(read_file(log), "ranks=2 backend=gloo (launched by srun)")) << read_file(log);
  std::string said;
  ASSERT_EQ(posenc::run_command({"scancel", "--signal=USR1", "--batch", job + "_0"}, said), 0) << said;
  EXPECT_TRUE(wait_for_lines(slurm_log, "checkpoint written to", 1, 60)) << read_file(slurm_log) << read_file(log);
  EXPECT_TRUE(wait_for_lines(log, "resuming " + out + "/runs/none-projected-max-s0 at step", 1, 180)) << read_file(log);
  ASSERT_TRUE(wait_for_queue_to_empty(job, 180)) << run_cli(compare + " --status").output;
  EXPECT_TRUE(fs::exists(out + "/runs/none-projected-max-s0/results.json")) << read_file(log);
  EXPECT_EQ(occurrences(read_file(log), "ranks=2 backend=gloo (launched by srun)"), 2u) << read_file(log);
  EXPECT_EQ(occurrences(read_file(log), "stopped by SIGTERM at step"), 1u) << "one line for both ranks:\n"
                                                                           << read_file(log);
}

// Real preemption by partition priority, in both modes that end a job
// (scripts/slurm-local.sh's partitions low-requeue and low-cancel, under
// "high"): a job in "high" that needs every CPU preempts one task of each; each
// run checkpoints at a step within the grace time, is requeued (by Slurm, or
// by its script), and resumes at that step.
TEST(SlurmCluster, PartitionPreemptionInBothModesCheckpointsAndResumesAtTheStep) {
  if (!posenc::testing::slurm_cluster_up())
    GTEST_SKIP() << "no Slurm cluster here (scripts/slurm-local.sh start, then SLURM_CONF)";
  std::string partitions;
  posenc::run_command({"sinfo", "-h", "-o", "%P"}, partitions);
  if (!contains(partitions, "low-requeue") || !contains(partitions, "low-cancel") || !contains(partitions, "high"))
    GTEST_SKIP() << "the cluster has no partitions low-requeue, low-cancel and high (scripts/slurm-local.sh makes "
                    "them): "
                 << partitions;
  std::string cpus;
  posenc::run_command({"sinfo", "-h", "-N", "-o", "%c"}, cpus);
  Scratch s("slurmpreempt");
  json grid = posenc::testing::tiny_grid();
  grid["schemes"] = {"none"};
  grid["set"]["train.steps"] = 100000000;  // ended below with SIGKILL
  grid["set"]["train.checkpoint_every"] = 100000000;
  write_file_atomic(s.path("grid.json"), grid.dump());
  const std::vector<std::string> modes = {"low-requeue", "low-cancel"};
  std::vector<std::string> jobs, logs;
  for (const auto& partition : modes) {
    const std::string out = s.path(partition);
    ASSERT_EQ(run_cli("compare " + s.path("grid.json") + " --out " + out + " --slurm --partition " + partition +
                      " --no-progress")
                  .code,
              0);
    jobs.push_back(read_json_file(out + "/slurm/jobs.json")["arrays"][0]["job_id"]);
    logs.push_back(out + "/logs/none-projected-max-s0.log");
  }
  for (const auto& log : logs) ASSERT_TRUE(wait_for_lines(log, "info step ", 3, 120)) << read_file(log);
  std::string said;
  ASSERT_EQ(posenc::run_command({"sbatch", "-p", "high", "-c", std::to_string(std::stoi(cpus)), "-o",
                                 s.path("high.log"), "--wrap", "sleep 3"},
                                said),
            0)
      << said;
  for (size_t k = 0; k < modes.size(); ++k) {
    SCOPED_TRACE(modes[k]);
    ASSERT_TRUE(wait_for_lines(logs[k], "stopped by SIGTERM at step ", 1, 90)) << read_file(logs[k]);
    const std::string text = read_file(logs[k]);
    const size_t at = text.find("stopped by SIGTERM at step ") + std::string("stopped by SIGTERM at step ").size();
    const std::string step = text.substr(at, text.find(':', at) - at);
    EXPECT_TRUE(wait_for_lines(logs[k], " at step " + step + "\n", 1, 180)) << "resumes at step " << step << ":\n"
                                                                            << read_file(logs[k]);
    EXPECT_TRUE(
        contains(read_file(logs[k]), "resuming " + s.path(modes[k]) + "/runs/none-projected-max-s0 at step " + step))
        << read_file(logs[k]);
  }
  for (const auto& job : jobs) EXPECT_TRUE(kill_until_gone(job)) << "job " << job;
}

TEST(SlurmCluster, AGridRunsToCompletionAndACancelledTaskResumes) {
  if (!posenc::testing::slurm_cluster_up())
    GTEST_SKIP() << "no Slurm cluster here (scripts/slurm-local.sh start, then SLURM_CONF)";
  Scratch s("slurmcluster");
  json grid = posenc::testing::tiny_grid();
  grid["seeds"] = {0, 1};
  write_file_atomic(s.path("grid.json"), grid.dump());
  const std::string out = s.path("out"), compare = "compare " + s.path("grid.json") + " --out " + out;

  // Four runs through sbatch, to completion, then collected.
  auto r = run_cli(compare + " --slurm --jobs 2 --time 10:00 --no-progress");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string job = read_json_file(out + "/slurm/jobs.json")["arrays"][0]["job_id"];
  ASSERT_TRUE(wait_for_queue_to_empty(job, 300)) << run_cli(compare + " --status").output;
  r = run_cli(compare + " --collect --no-figures --no-progress");
  EXPECT_EQ(r.code, 0) << r.output << run_cli(compare + " --status").output;
  const json summary = read_json_file(out + "/summary.json");
  size_t seeds = 0;
  for (const auto& v : summary["variants"]) seeds += v["seeds"].size();
  EXPECT_EQ(seeds, 4u);

  // One longer run, stopped mid-way with the SIGTERM Slurm sends before a time
  // limit: it checkpoints, goes back in the queue and resumes from its step.
  json longer = posenc::testing::tiny_grid();
  longer["schemes"] = {"none"};
  longer["set"]["train.steps"] = 600;  // stopped after its step-100 checkpoint
  longer["set"]["train.eval_every"] = 600;
  longer["set"]["train.checkpoint_every"] = 100;
  write_file_atomic(s.path("long.json"), longer.dump());
  const std::string out2 = s.path("out2"), compare2 = "compare " + s.path("long.json") + " --out " + out2;
  ASSERT_EQ(run_cli(compare2 + " --slurm --no-progress").code, 0);
  const std::string job2 = read_json_file(out2 + "/slurm/jobs.json")["arrays"][0]["job_id"];
  const fs::path run = fs::path(out2) / "runs" / "none-projected-max-s0";
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(run / "checkpoint.pt") && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(run / "checkpoint.pt")) << run_cli(compare2 + " --status").output;
  std::string said;
  ASSERT_EQ(posenc::run_command({"scancel", "--signal=TERM", "--batch", job2 + "_0"}, said), 0) << said;
  // The script requeues it; it may start again after the cluster's CredExpire (10 s on the local one).
  for (int i = 0; i < 100; ++i) {
    posenc::run_command({"squeue", "-h", "-j", job2, "-o", "%T %r"}, said);
    if (contains(said, "PENDING")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(contains(said, "PENDING")) << "not requeued: " << said;
  ASSERT_TRUE(wait_for_queue_to_empty(job2, 300)) << run_cli(compare2 + " --status").output;
  const std::string log = read_file(out2 + "/logs/none-projected-max-s0.log");
  EXPECT_TRUE(contains(log, "stopped by SIGTERM at step")) << log;
  EXPECT_TRUE(contains(log, "resuming")) << log;
  EXPECT_TRUE(fs::exists(run / "results.json")) << log;
}

}  // namespace POSENC_TEST_UNIT
