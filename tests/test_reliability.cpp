// Reliability: stopping by signal, failed writes, NaN/inf, damaged and hostile
// input. Each test checks what a user keeps: the checkpoint, the results, a
// one-line error that names the file or the key.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/trainer.h"
#include "posenc/util/io.h"
#include "posenc/util/memory_budget.h"
#include "posenc/util/python.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::expect_one_line_error;
using posenc::testing::fresh_dir;
using posenc::testing::kBitExactDevice;
using posenc::testing::parameters_of;
using posenc::testing::run_cli;
using posenc::testing::Scratch;
using posenc::testing::small_config;
using posenc::testing::wait_for;
using posenc::testing::write_config;
namespace fs = std::filesystem;

namespace {

/// NAME.posenc-tmp.PID files anywhere under dir.
std::vector<std::string> temporaries(const fs::path& dir) {
  static const std::regex tmp(R"(.+\.posenc-tmp\.[0-9]+)");
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), tmp)) out.push_back(e.path().string());
  return out;
}

/// The last logged training step in a run directory's metrics.jsonl.
int64_t logged_step(const fs::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  int64_t step = 0;
  for (std::string line; std::getline(in, line);) {
    try {
      step = std::max(step, json::parse(line).value("step", int64_t{0}));
    } catch (const json::exception&) {
    }
  }
  return step;
}

json results_without_timing(const fs::path& run) {
  json r = read_json_file((run / "results.json").string());
  r.erase("train_seconds");
  r["config"]["train"].erase("out_dir");
  return r;
}

}  // namespace

// ---------------------------------------------------------------- signals

TEST(Signals, SighupFromAClosedSessionCheckpointsLikeSigterm) {
  Scratch s("sighup");
  const std::string config =
      write_config(s, "c.json", {"train.steps=3000", "train.checkpoint_every=100000", "eval.lengths=[8]"});
  const fs::path run = s.dir / "run";
  const pid_t pid =
      posenc::testing::start_cli({"train", config, "--out", run.string(), "--no-progress"}, s.path("log"));
  ASSERT_TRUE(wait_for([&] { return logged_step(run) >= 10; }, 120)) << posenc::tail_lines(s.path("log"), 20);
  ::kill(pid, SIGHUP);
  const auto end = posenc::testing::wait_child(pid);
  const std::string log = posenc::tail_lines(s.path("log"), 20);
  EXPECT_EQ(end.code, 129) << log;  // 128 + SIGHUP, after saving
  EXPECT_NE(log.find("stopped by SIGHUP at step"), std::string::npos) << log;
  ASSERT_TRUE(fs::exists(run / "checkpoint.pt")) << log;
  Config stored;
  auto model = load_model((run / "checkpoint.pt").string(), torch::kCPU, &stored);
  EXPECT_GE(load_checkpoint((run / "checkpoint.pt").string(), model, nullptr), 10);
}

TEST(Signals, SigtermDuringALongValidationCheckpointsAtOnceAndTheResumeValidatesFirst) {
  Scratch s("sigterm_val");
  // A validation of 400,000 examples takes minutes on the CPU (a GPU would finish
  // it before the signal); the stop must not wait for it.
  const std::string config = write_config(s, "c.json",
                                          {"train.steps=20", "train.eval_every=10", "train.val_samples=400000",
                                           "eval.lengths=[8]", "train.device=\"cpu\""});
  const fs::path run = s.dir / "run";
  const pid_t pid =
      posenc::testing::start_cli({"train", config, "--out", run.string(), "--no-progress"}, s.path("log"));
  ASSERT_TRUE(wait_for([&] { return logged_step(run) >= 10; }, 120)) << posenc::tail_lines(s.path("log"), 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // into the validation at step 10
  const auto sent = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  const auto end = posenc::testing::wait_child(pid);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  const std::string log = posenc::tail_lines(s.path("log"), 20);
  EXPECT_EQ(end.code, 143) << log;
  // The bar is 2 s; the bound leaves room for a loaded machine, far below the validation's minutes.
  EXPECT_LT(seconds, 15.0) << log;
  EXPECT_NE(log.find("stopped by SIGTERM at step 10"), std::string::npos) << log;
  ASSERT_TRUE(fs::exists(run / "checkpoint.pt"));
  json stored;
  auto model = load_model((run / "checkpoint.pt").string(), torch::kCPU);
  EXPECT_EQ(load_checkpoint((run / "checkpoint.pt").string(), model, nullptr, &stored), 10);
  EXPECT_EQ(stored.value("validation_pending", false), true) << stored.dump();
}

TEST(Signals, SigtermCheckpointsTheCurrentStepAndResumeMatchesAnUninterruptedRun) {
  Scratch s("sigterm");
  const std::string config =
      // min_lr_ratio=1: a flat schedule after warm-up, so the stopped 3000-step run
      // and the shorter ones it is compared with follow the same learning rates.
      write_config(s, "c.json",
                   {"train.steps=3000", "train.checkpoint_every=100000", "model.dropout=0.1", "train.log_every=5",
                    "eval.lengths=[8]", "train.min_lr_ratio=1", kBitExactDevice});
  const fs::path run = s.dir / "run";
  const pid_t pid =
      posenc::testing::start_cli({"train", config, "--out", run.string(), "--no-progress"}, s.path("log"));
  ASSERT_TRUE(wait_for([&] { return logged_step(run) >= 20; }, 120)) << posenc::tail_lines(s.path("log"), 20);
  ::kill(pid, SIGTERM);
  const auto end = posenc::testing::wait_child(pid);
  const std::string log = posenc::tail_lines(s.path("log"), 20);
  EXPECT_EQ(end.code, 143) << log;  // 128 + SIGTERM, after saving
  EXPECT_NE(log.find("stopped by SIGTERM at step"), std::string::npos) << log;
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(run / "results.json"));
  EXPECT_TRUE(temporaries(s.dir).empty());

  // The checkpoint holds the step it stopped at (no checkpoint_every was due).
  Config stored;
  auto model = load_model((run / "checkpoint.pt").string(), torch::kCPU, &stored);
  FusedAdamW optimizer = make_optimizer(model, stored.train);
  const int64_t stopped = load_checkpoint((run / "checkpoint.pt").string(), model, &optimizer);
  EXPECT_GE(stopped, 20);
  EXPECT_LT(stopped, 3000);

  // Resume to a total a little past the stop, and compare with a run that was never stopped.
  const int64_t total = stopped + 23;
  const std::string steps = "train.steps=" + std::to_string(total);
  // Spelled differently (a trailing slash): the same run directory.
  const auto resumed =
      run_cli("train " + config + " --out " + run.string() + "/ --set " + steps + " --resume --no-progress");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const fs::path straight = s.dir / "straight";
  const auto uninterrupted =
      run_cli("train " + config + " --out " + straight.string() + " --set " + steps + " --no-progress");
  ASSERT_EQ(uninterrupted.code, 0) << uninterrupted.output;
  EXPECT_EQ(results_without_timing(run), results_without_timing(straight));
  const auto a = parameters_of((run / "checkpoint.pt").string()),
             b = parameters_of((straight / "checkpoint.pt").string());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

TEST(Signals, SigintGivesExit130AndASecondSignalStopsAtOnce) {
  Scratch s("sigint");
  const std::string config = write_config(s, "c.json", {"train.steps=100000", "train.checkpoint_every=10"});
  const fs::path run = s.dir / "run";
  pid_t pid = posenc::testing::start_cli({"train", config, "--out", run.string(), "--no-progress"}, s.path("log"));
  ASSERT_TRUE(wait_for([&] { return logged_step(run) >= 20; }, 120));
  ::kill(pid, SIGINT);
  EXPECT_EQ(posenc::testing::wait_child(pid).code, 130) << posenc::tail_lines(s.path("log"), 10);

  // Two signals in a row: the second one ends the process by its default action.
  pid =
      posenc::testing::start_cli({"train", config, "--out", run.string(), "--resume", "--no-progress"}, s.path("log2"));
  const int64_t before = logged_step(run);
  ASSERT_TRUE(wait_for([&] { return logged_step(run) >= before + 20; }, 120));
  // Two different signals (two of one kind may merge into one while pending):
  // whichever is delivered second ends the process by its default action.
  ::kill(pid, SIGTERM);
  ::kill(pid, SIGINT);
  const auto end = posenc::testing::wait_child(pid);
  EXPECT_TRUE(end.signal == SIGTERM || end.signal == SIGINT) << "exit " << end.code << "\n"
                                                             << posenc::tail_lines(s.path("log2"), 10);
  // Whatever it was doing, the last complete checkpoint loads, and the next start clears any temporary file.
  EXPECT_NO_THROW(load_model((run / "checkpoint.pt").string(), torch::kCPU));
  const auto again = run_cli("train " + config + " --out " + run.string() + " --resume --set train.steps=" +
                             std::to_string(logged_step(run) + 5) + " --set eval.lengths=[8] --no-progress");
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_TRUE(temporaries(s.dir).empty());
}

// Slurm's `scancel --signal=TERM --full` and partition preemption signal every
// process of the job, and the job script forwards the same signal: a run gets
// SIGTERM two or three times for one stop, and must still checkpoint.
TEST(Signals, ARepeatedSigtermIsTheSameStopAndStillCheckpoints) {
  Scratch s("sigterm_twice");
  const std::string config = write_config(s, "c.json", {"train.steps=100000", "train.checkpoint_every=100000"});
  const fs::path run = s.dir / "run";
  const pid_t pid =
      posenc::testing::start_cli({"train", config, "--out", run.string(), "--no-progress"}, s.path("log"));
  ASSERT_TRUE(wait_for([&] { return logged_step(run) >= 20; }, 120));
  for (int i = 0; i < 3; ++i) {  // apart, so that they do not merge into one pending signal
    ::kill(pid, SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto end = posenc::testing::wait_child(pid);
  const std::string log = posenc::tail_lines(s.path("log"), 10);
  EXPECT_EQ(end.code, 143) << "signal " << end.signal << "\n" << log;
  EXPECT_NE(log.find("stopped by SIGTERM at step"), std::string::npos) << log;
  EXPECT_NO_THROW(load_model((run / "checkpoint.pt").string(), torch::kCPU)) << "the stop's checkpoint";
}

TEST(Signals, EvalStoppedBySignalWritesNoResultsFile) {
  Scratch s("sigeval");
  const std::string config = write_config(s, "c.json", {"train.steps=10", "eval.lengths=[8]"});
  const fs::path run = s.dir / "run";
  ASSERT_EQ(run_cli("train " + config + " --out " + run.string() + " --no-progress").code, 0);
  const std::string out = s.path("eval.json");
  // Long enough to be stopped half way: many examples at a long length.
  const pid_t pid = posenc::testing::start_cli(
      {"eval", (run / "checkpoint.pt").string(), "--lengths", "8,512", "--samples", "200000", "--out", out},
      s.path("log"));
  // Once its signal handlers are in (they come before the environment line), and a moment into the work.
  ASSERT_TRUE(
      wait_for([&] { return posenc::tail_lines(s.path("log"), 5).find("libtorch=") != std::string::npos; }, 60));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ::kill(pid, SIGTERM);
  const auto end = posenc::testing::wait_child(pid);
  const std::string log = posenc::tail_lines(s.path("log"), 10);
  EXPECT_EQ(end.code, 143) << log;
  EXPECT_NE(log.find("no results written"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(temporaries(s.dir).empty());
}

// ---------------------------------------------------------------- failed writes

TEST(WriteFailure, EachWriteOfATrainRunFailsWithOneLineAndKeepsThePreviousCheckpoint) {
  Scratch s("writefail");
  const std::string config = write_config(
      s, "c.json", {"train.steps=30", "train.checkpoint_every=10", "train.eval_every=30", "eval.lengths=[8]"});
  // Writes of this run, in order: metrics.jsonl (created), config.json, metrics
  // lines and checkpoints every 10 steps, the validation line, results.json.
  int failures_seen = 0;
  for (int n = 1;; ++n) {
    ASSERT_LT(n, 40) << "the run never got through all its writes";
    const fs::path run = s.dir / ("run" + std::to_string(n));
    ::setenv("POSENC_FAIL_WRITE", std::to_string(n).c_str(), 1);
    const auto r = run_cli("train " + config + " --out " + run.string() + " --no-progress");
    ::unsetenv("POSENC_FAIL_WRITE");
    SCOPED_TRACE("write " + std::to_string(n) + ":\n" + r.output);
    EXPECT_TRUE(temporaries(run).empty());
    if (r.code == 0) {  // n is past the last write
      EXPECT_NE(r.output.find("done: 30 steps"), std::string::npos);
      EXPECT_TRUE(fs::exists(run / "results.json"));
      break;
    }
    ++failures_seen;
    EXPECT_EQ(r.code, 1);
    expect_one_line_error(r.output, "No space left on device");
    EXPECT_TRUE(std::regex_search(r.output, std::regex("error: cannot write " + run.string() + "/[a-z.]+: No space")));
    EXPECT_FALSE(fs::exists(run / "results.json"));
    // Whatever checkpoint there is, is a complete one.
    if (fs::exists(run / "checkpoint.pt")) {
      EXPECT_NO_THROW(load_model((run / "checkpoint.pt").string(), torch::kCPU));
    } else if (n >= 2) {
      // Failed before its first checkpoint: it took back its config.json, so the same command may rerun there.
      EXPECT_FALSE(fs::exists(run / "config.json"));
      if (n == 3) {
        EXPECT_EQ(run_cli("train " + config + " --out " + run.string() + " --no-progress").code, 0);
      }
    }
  }
  EXPECT_GE(failures_seen, 8);  // metrics, config, 3 checkpoints, log lines, validation, results
}

TEST(WriteFailure, AFullTmpfsIsAOneLineErrorWithNothingLeftBehind) {
  Scratch s("tmpfs");
  const fs::path mnt = s.dir / "small";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=300k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "); the fault-injection test covers it";
  const fs::path run = mnt / "run";
  const auto r = run_cli("train " + std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json --set train.steps=60 " +
                         "--set eval.lengths=[8] --out " + run.string() + " --no-progress");
  const auto left = temporaries(mnt);
  ::umount(mnt.c_str());
  EXPECT_EQ(r.code, 1) << r.output;
  expect_one_line_error(r.output, "cannot write " + run.string() + "/checkpoint.pt: No space left on device");
  EXPECT_TRUE(left.empty()) << left.front();
}

// ---------------------------------------------------------------- NaN / inf

TEST(Divergence, APoisonedWeightStopsTheRunAndKeepsTheLastFiniteCheckpoint) {
  const auto dir = fresh_dir("diverge");
  TrainHooks poison;
  poison.poison_at_step = 25;
  const Config cfg = small_config(dir, {"train.steps=100", "train.checkpoint_every=10", "train.log_every=10"});
  try {
    train_with_hooks(cfg, TrainRequest{}, poison);
    FAIL() << "a NaN weight must stop the run";
  } catch (const Diverged& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the loss became NaN or inf at step 25"), std::string::npos) << what;
    EXPECT_NE(what.find("step 20) is finite and kept"), std::string::npos) << what;
  }
  // Found at the step-30 log line, before that step's checkpoint: the step-20 one stays.
  Config stored;
  auto model = load_model((dir / "checkpoint.pt").string(), torch::kCPU, &stored);
  FusedAdamW optimizer = make_optimizer(model, stored.train);
  EXPECT_EQ(load_checkpoint((dir / "checkpoint.pt").string(), model, &optimizer), 20);
  for (const auto& p : model->parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
  const json diverged = read_json_file((dir / run_files::kDiverged).string());
  EXPECT_EQ(diverged["step"], 25);
  EXPECT_EQ(diverged["non_finite"], "loss");
  EXPECT_EQ(diverged["last_checkpoint_step"], 20);
  EXPECT_FALSE(fs::exists(dir / "results.json"));
  // No metrics line past the last finite interval.
  EXPECT_EQ(logged_step(dir), 20);
  fs::remove_all(dir);
}

// NaN from the initial weights (xPos's scale base so small that its scales
// overflow float32) is not the learning rate's doing, and the message says so.
TEST(Divergence, NanBeforeAnyUpdateBlamesTheModelNotTheLearningRate) {
  const auto dir = fresh_dir("diverge1");
  try {
    train(small_config(dir, {"train.steps=20", "model.positional.type=\"xpos\"", "model.positional.scale_base=0.001"}),
          TrainRequest{});
    FAIL() << "xPos with scale_base=0.001 must overflow";
  } catch (const Diverged& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NaN or inf at step 1, from the initial weights before any update"), std::string::npos) << what;
    EXPECT_NE(what.find("model.positional.type=xpos"), std::string::npos) << what;
    EXPECT_EQ(what.find("Lower train.lr"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

TEST(RunDirectory, TheRootAndTheKernelsDirectoriesAreRefused) {
  for (const std::string out : {"/", "/dev", "/proc/self", "/sys/x/run", "/../"}) {
    const auto r = run_cli("train " + std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json --no-progress --out " +
                           out + " --set train.steps=1");
    EXPECT_EQ(r.code, 2) << out << ": " << r.output;
    expect_one_line_error(r.output, "train.out_dir (--out) " + out + ": outputs need a directory of their own");
  }
}

TEST(Divergence, FoundWithoutGradientClippingAndBeforeAnyCheckpoint) {
  const auto dir = fresh_dir("diverge0");
  TrainHooks poison;
  poison.poison_at_step = 3;
  try {
    train_with_hooks(small_config(dir, {"train.steps=50", "train.grad_clip=0", "train.checkpoint_every=40"}),
                     TrainRequest{}, poison);
    FAIL();
  } catch (const Diverged& e) {
    EXPECT_NE(std::string(e.what()).find("at step 3; no checkpoint was written before it"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "checkpoint.pt"));
  fs::remove_all(dir);
}

TEST(Divergence, ACheckpointIsNeverWrittenFromNonFiniteWeights) {
  const auto dir = fresh_dir("nanckpt");
  const Config cfg = small_config(dir);
  Transformer model(cfg.model, task_vocab_size(cfg.task));
  save_checkpoint((dir / "c.pt").string(), model, nullptr, 1, cfg);
  {
    torch::NoGradGuard no_grad;
    model->parameters().back().fill_(std::numeric_limits<float>::infinity());
  }
  EXPECT_THROW(save_checkpoint((dir / "c.pt").string(), model, nullptr, 2, cfg), std::runtime_error);
  auto loaded = load_model((dir / "c.pt").string(), torch::kCPU);  // the finite one is still there
  for (const auto& p : loaded->parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
  fs::remove_all(dir);
}

TEST(Divergence, CompareReportsADivergedRunAsFailedAndDoesNotRetryIt) {
  Scratch s("comparediverge");
  json grid = posenc::testing::tiny_grid();
  grid["set"]["eval.lengths"] = {8};
  grid["schemes"] = {"none"};
  write_file_atomic(s.path("grid.json"), grid.dump());
  const std::string args = "compare " + s.path("grid.json") + " --out " + s.path("out") + " --no-figures --no-progress";
  ::setenv("POSENC_POISON_STEP", "15", 1);
  const auto first = run_cli(args);
  ::unsetenv("POSENC_POISON_STEP");
  EXPECT_EQ(first.code, 1) << first.output;
  EXPECT_NE(first.output.find("none-projected-max-s0 DIVERGED"), std::string::npos) << first.output;
  const json summary = read_json_file(s.path("out") + "/summary.json");
  ASSERT_EQ(summary["diverged"].size(), 1u);
  EXPECT_EQ(summary["diverged"][0]["run"], "none-projected-max-s0");
  EXPECT_TRUE(summary["unfinished"].empty());
  EXPECT_TRUE(summary["variants"].empty());
  const auto second = run_cli(args);
  EXPECT_NE(second.output.find("1 diverged already, 0 to resume, 0 to start"), std::string::npos) << second.output;
}

// ---------------------------------------------------------------- run directories

TEST(RunDirectory, AMovedRunResumesAndTimeAndLossWindowSpanTheSegments) {
  const auto straight = fresh_dir("moved_straight"), first = fresh_dir("moved_a"), moved = fresh_dir("moved_b");
  // Stop at step 25, half way through a 10-step log window.
  const std::vector<std::string> run = {"train.steps=40", "train.checkpoint_every=20", "model.dropout=0.1",
                                        kBitExactDevice};
  TrainRequest opts;
  opts.skip_final_eval = true;
  const auto whole = train(small_config(straight, run), opts);
  opts.stop_at_step = 25;
  const auto part = train(small_config(first, run), opts);
  fs::rename(first, moved);
  opts.stop_at_step = 0;
  opts.resume = true;
  const auto rest = train(small_config(moved, run), opts);  // out_dir differs from the stored one: allowed
  EXPECT_EQ(rest.final_loss, whole.final_loss);             // the window 31..40 spans no restart, 21..30 did
  EXPECT_GE(rest.seconds, part.seconds);                    // time of both segments
  const json results = read_json_file((moved / "results.json").string());
  EXPECT_EQ(results["final_train_loss"].get<double>(), whole.final_loss);
  EXPECT_EQ(results["train_seconds"].get<double>(), rest.seconds);
  // Metrics lines agree with the uninterrupted run's, the step-30 one included.
  auto losses = [](const fs::path& dir) {
    std::vector<double> out;
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (auto j = json::parse(line); j.contains("loss")) out.push_back(j["loss"]);
    return out;
  };
  EXPECT_EQ(losses(moved), losses(straight));
  // Resuming with fewer steps than the checkpoint holds is an error, not "done: 30 steps".
  try {
    train(small_config(moved, {"train.steps=30", "train.checkpoint_every=20", "model.dropout=0.1"}), opts);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is at step 40, past train.steps=30"), std::string::npos) << e.what();
  }
  for (const auto& d : {straight, moved}) fs::remove_all(d);
}

TEST(RunDirectory, AnotherRunsFilesACompareRootAndALiveTrainAreRefused) {
  Scratch s("rundir");
  TrainRequest opts;
  opts.skip_final_eval = true;
  // config.json of another run, no checkpoint.
  const fs::path other = s.dir / "other";
  write_file_atomic((other / "config.json").string(), config_to_json(small_config(other, {"model.d_model=16"})).dump());
  try {
    train(small_config(other, {"train.steps=5"}), opts);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("holds config.json of another run (first difference at /model/d_model)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(other / "train.lock")) << "a refused train leaves no lock file behind";
  // results.json without a checkpoint.
  const fs::path done = s.dir / "done";
  write_file_atomic((done / "results.json").string(), "{}");
  EXPECT_THROW(train(small_config(done, {"train.steps=5"}), opts), ConfigError);
  EXPECT_FALSE(fs::exists(done / "train.lock"));
  // A compare output root.
  const fs::path root = s.dir / "root";
  write_file_atomic((root / "compare.lock").string(), "");
  try {
    train(small_config(root, {"train.steps=5"}), opts);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is the output directory of a posenc compare"), std::string::npos);
  }
  // The same run's unfinished start (config.json, no checkpoint) may start again, and
  // temporary files of interrupted writes are removed, but only those whose writer is gone.
  const fs::path again = s.dir / "again";
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  posenc::testing::wait_child(gone);
  const std::string dead_writer =
      (again / ("checkpoint.pt" + std::string(kTemporaryInfix) + std::to_string(gone))).string();
  const std::string live_writer =
      (again / ("notes.txt" + std::string(kTemporaryInfix) + std::to_string(::getpid()))).string();
  // A user's own file of a name like a temporary's, whose number is no live process: not posenc's to remove.
  const std::string users = (again / ("mynotes.tmp." + std::to_string(gone))).string();
  write_file_atomic(users, "mine");
  write_file_atomic((again / "config.json").string(), config_to_json(small_config(again, {"train.steps=5"})).dump());
  write_file_atomic(dead_writer, "partial");
  write_file_atomic(live_writer, "being written");
  train(small_config(again, {"train.steps=5"}), opts);
  EXPECT_FALSE(fs::exists(dead_writer));
  EXPECT_TRUE(fs::exists(live_writer));
  EXPECT_EQ(read_file(users), "mine");
  fs::remove(live_writer);

  // Two trains on one directory: the second is refused while the first runs.
  const std::string config = write_config(s, "long.json", {"train.steps=100000"});
  const fs::path busy = s.dir / "busy";
  const pid_t pid =
      posenc::testing::start_cli({"train", config, "--out", busy.string(), "--no-progress"}, s.path("log"));
  ASSERT_TRUE(wait_for([&] { return logged_step(busy) >= 10; }, 120));
  const auto second = run_cli("train " + config + " --out " + busy.string() + "/ --no-progress");
  ::kill(pid, SIGTERM);
  posenc::testing::wait_child(pid);
  EXPECT_EQ(second.code, 2);
  expect_one_line_error(second.output, "another posenc train is running on " + busy.string());
}

// ---------------------------------------------------------------- messages

TEST(Messages, BadFilesAndFlagsSayWhatIsWrong) {
  Scratch s("messages");
  write_file_atomic(s.path("array.json"), "[1, 2]");
  auto r = run_cli("train " + s.path("array.json") + " --out " + s.path("x"));
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "array.json: a config file must hold one JSON object");

  write_file_atomic(s.path("dup.json"), "{\"train\": {\"steps\": 5, \"steps\": 6}}");
  r = run_cli("train " + s.path("dup.json") + " --out " + s.path("x"));
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "key \"steps\" appears twice in \"train\"");

  const std::string config = write_config(s, "c.json");
  r = run_cli("train " + config + " --set train.lr=1e400 --out " + s.path("x"));
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "--set train.lr=1e400: a number is out of range");

  r = run_cli("train " + config + " --out ''");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--out: must not be empty"), std::string::npos) << r.output;  // the flag named once

  r = run_cli("train " + config + " --out " + s.path("bad\xff"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("is not valid UTF-8"), std::string::npos) << r.output;
  r = run_cli("train " + config + " --set train.out_dir=" + s.path("bad\xff"));
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "is not valid UTF-8");
  EXPECT_FALSE(fs::exists(s.path("bad\xff")));

  r = run_cli("train " + config + " --set train.seed=18446744073709551615 --out " + s.path("x"));
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "train.seed: 18446744073709551615 is out of range");

  r = run_cli("eval " + config + " --lengths abc");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("'abc' is not an integer"), std::string::npos) << r.output;

  r = run_cli("train " + config +
              " --set model.d_model=66 --set model.heads=6 --set model.positional.type=rope --out " + s.path("odd"));
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "the head dimension is 11 (odd");
}

TEST(Messages, SlipsAreNamedForWhatTheyAre) {
  Scratch s("slips");
  const std::string config = write_config(s, "c.json");
  // `posenc ARGS` is refused with exit 2 and one error line that holds `fragment`.
  const auto refused = [](const std::string& args, const std::string& fragment) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args;
    expect_one_line_error(r.output, fragment);
    return r.output;
  };
  // A section replaced by a number is the slip, not the --out that comes after it.
  auto out = refused("train " + config + " --set train=5 --out " + s.path("x"),
                     "'train' is a section of the config; set one of its options (train.NAME=VALUE)");
  EXPECT_EQ(out.find("out_dir"), std::string::npos) << out;
  refused("train " + config + " --set train.steps.x=1 --out " + s.path("x"),
          "'train.steps' is 3000, not a section with options");
  // --device cuda without CUDA names the flag typed, not the config key it sets.
  if (!torch::cuda::is_available())
    refused("train " + config + " --device cuda --out " + s.path("x"),
            "--device cuda, but this LibTorch build sees no CUDA device");
  // A prompt is text, not a path.
  out = refused("generate " + config + " --prompt \"$(printf 'a\\377')\"", "the prompt must be UTF-8 text");
  EXPECT_EQ(out.find("paths"), std::string::npos) << out;
  // An empty item of a comma-separated list is a slip (an extra comma), not an item to drop (every list flag:
  // CliContract.EveryListFlagRefusesAnEmptyItem); an empty value is refused as such.
  refused("eval " + config + " --lengths ''", "--lengths: must not be empty");
  // A length named twice is refused however the list is written: in one value or across repeated flags.
  refused("eval " + config + " --lengths 8,16 --lengths 16", "--lengths: 16 appears twice");
  // A null or an empty list is named as what it is ("got null null" and "got 0" said it twice or not at all).
  out = refused("train " + config + " --set train.steps=null --out " + s.path("x"),
                "train.steps: expected an integer, got null");
  EXPECT_EQ(out.find("null null"), std::string::npos) << out;
  refused("train " + config + " --set eval.lengths=[] --out " + s.path("x"),
          "eval.lengths: expected a non-empty array of at most 256 integers, got an empty one");
  // A 20 KB value is quoted by its start and its size, not echoed whole.
  out = refused("train " + config + " --set " + std::string(20000, 'a') + " --out " + s.path("x"),
                "... (20000 characters): expected path=value");
  EXPECT_LT(out.size(), 1000u) << out.size();
}

TEST(Refused, APythonNamedInPosencPythonIsUsedOrRefusedNeverReplaced) {
  Scratch s("posencpython");
  ::setenv("POSENC_PYTHON", "/nonexistent/python3", 1);
  EXPECT_EQ(find_python("sys"), "");  // no fallback to /usr/bin/python3
  std::string message = posenc::testing::error_of([] { check_posenc_python("sys"); });
  EXPECT_NE(message.find("POSENC_PYTHON=/nonexistent/python3: does not run"), std::string::npos) << message;
  // compare says so before it trains anything.
  json grid = posenc::testing::tiny_grid();
  write_file_atomic(s.path("grid.json"), grid.dump());
  auto r = run_cli("compare " + s.path("grid.json") + " --out " + s.path("cmp") + " --no-progress");
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "POSENC_PYTHON=/nonexistent/python3: does not run");
  EXPECT_FALSE(fs::exists(s.dir / "cmp" / "runs"));
  if (fs::exists("/usr/bin/python3")) {
    ::setenv("POSENC_PYTHON", "/usr/bin/python3", 1);
    EXPECT_EQ(find_python("sys"), "/usr/bin/python3");
    message = posenc::testing::error_of([] { check_posenc_python("no_such_module_of_posenc"); });
    EXPECT_NE(message.find("cannot import no_such_module_of_posenc"), std::string::npos) << message;
  }
  ::unsetenv("POSENC_PYTHON");
  EXPECT_NO_THROW(check_posenc_python("no_such_module_of_posenc"));  // unset: nothing asked for, nothing to check
}

// ---------------------------------------------------------------- early checks

TEST(EarlyChecks, CharLmWithTooLittleHeldOutTextFailsBeforeTheFirstStep) {
  Scratch s("charlm_early");
  {
    std::ofstream out(s.path("corpus.txt"));
    for (int i = 0; i < 40; ++i) out << "abcdefgh ";
  }
  const std::string base =
      "train " + std::string(POSENC_SOURCE_DIR) +
      "/configs/charlm.json --no-progress --set task.path=" + s.path("corpus.txt") +
      " --set task.min_length=32 --set task.max_length=64 --set model.d_model=16 --set model.heads=2"
      " --set model.layers=1 --set model.d_ff=32 --set train.steps=4 --set train.val_samples=4"
      " --set eval.lengths=[32] --out " +
      s.path("run");
  // 360 bytes, a tenth held out: 36 bytes, less than one validation window of 65.
  auto r = run_cli(base + " --set task.val_fraction=0.1");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "held-out part of " + s.path("corpus.txt"));
  EXPECT_EQ(r.output.find("step 1"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(s.path("run/config.json")));
  r = run_cli(base + " --set task.val_fraction=0.3");
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(EarlyChecks, ATrainingStepOrAnAttentionMapThatCannotFitIsRefusedUpFront) {
  Scratch s("too_big");
  {
    std::ofstream out(s.path("corpus.txt"));
    for (int i = 0; i < 30000; ++i) out << "abcdefgh ";
  }
  // 16,384 characters of context on 32 examples: terabytes of attention
  // scores on the CPU. (On a GPU the fused kernels hold no scores, and the
  // step fits an H200's memory: there it would train.)
  auto r = run_cli("train " + std::string(POSENC_SOURCE_DIR) +
                   "/configs/charlm.json --device cpu --no-progress --set task.path=" + s.path("corpus.txt") +
                   " --set task.min_length=16384 --set task.max_length=16384" +
                   " --set eval.lengths=[16384] --set train.batch_size=32 --out " + s.path("run"));
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "a training step at task.max_length needs about");
  EXPECT_FALSE(fs::exists(s.path("run/config.json")));

  const std::string config = write_config(s, "c.json", {"train.steps=2", "eval.lengths=[8]"});
  ASSERT_EQ(run_cli("train " + config + " --out " + s.path("small") + " --no-progress").code, 0);
  r = run_cli("attention " + s.path("small/checkpoint.pt") + " --length 4096");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "the attention maps would hold");
  r = run_cli("attention " + s.path("small/checkpoint.pt") + " --length 8 --kind bogus");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "--kind bogus: task ordering has the kinds sorted, shuffle");
}

// The model itself (weights, gradients, AdamW's two moments) is counted from
// the config before a byte of it is allocated, against the least of
// MemAvailable, the address-space limit and the cgroup's memory.max.
TEST(EarlyChecks, TheModelIsCountedBeforeItIsBuiltAgainstTheAddressSpaceLimit) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "built with AddressSanitizer, which reserves terabytes of address space at start-up: "
                  "no process of this build starts under ulimit -v";
#endif
  Scratch s("model_memory_ulimit");
  const std::string ordering = std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json";
  // 16.8 M tokens x 64: 1.07 G parameters, 16 GiB with gradients and moments, under a 4 GB address space.
  auto r = run_cli("train " + ordering + " --set task.vocab_size=16777216 --no-progress --out " + s.path("a"),
                   "ulimit -v 4000000;");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "the model needs about 16.0 GiB of memory (at least 1.07e+09 parameters");
  EXPECT_NE(r.output.find("ulimit -v"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(s.path("a/config.json")));
}

TEST(EarlyChecks, TheModelIsCountedBeforeItIsBuiltAgainstTheMemoryThereIs) {
  Scratch s("model_memory");
  const std::string ordering = std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json";
  // 19 G parameters: more than any machine this runs on has, with no limit set.
  auto r = run_cli("train " + ordering +
                   " --set model.d_model=16384 --set model.d_ff=65536 --set model.layers=8 --no-progress --out " +
                   s.path("b"));
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "the model needs about");
  EXPECT_EQ(r.output.find("step 1"), std::string::npos) << r.output;
}

// --nproc N weighs N models against the memory before any rank starts, and
// says when the ranks outnumber the cores.
TEST(EarlyChecks, NprocIsWeighedAgainstMemoryAndCoresBeforeAnyRankStarts) {
  Scratch s("nproc_fit");
  const MemoryBudget budget = cpu_memory_budget();
  if (budget.bytes <= 0) GTEST_SKIP() << "no memory figure to check against";
  // One rank's model needs 0.7 of what is available, two need 1.4.
  const int64_t vocab = 4000000;
  const int64_t width = static_cast<int64_t>(0.7 * budget.bytes / (16.0 * vocab) / 4) * 4;
  if (width < 8 || width > 65536) GTEST_SKIP() << "memory out of the range this test sizes for";
  const std::string ordering = std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json";
  // On the CPU: this is about the machine's memory and cores (a GPU has its own check, one rank per GPU).
  auto r = run_cli("train " + ordering + " --device cpu --nproc 2 --set task.vocab_size=" + std::to_string(vocab) +
                   " --set model.d_model=" + std::to_string(width) + " --set model.d_ff=64 --no-progress --out " +
                   s.path("big"));
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "--nproc 2 needs about");
  EXPECT_EQ(r.output.find("started"), std::string::npos) << r.output;
  POSENC_SKIP_WITHOUT_GLOO();
  // One rank more than there are cores: trained, and said.
  const int ranks = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) + 1;
  const std::string config = write_config(s, "c.json", {"train.steps=2", "eval.lengths=[8]"});
  r = run_cli("train " + config + " --device cpu --nproc " + std::to_string(ranks) +
              " --set train.batch_size=" + std::to_string(4 * ranks) + " --no-progress --out " + s.path("many"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("threads on " + std::to_string(ranks - 1) + " cores: the ranks take turns"),
            std::string::npos)
      << r.output;
}

// `posenc train ... | head -2`: the reader goes away after two lines; the run
// goes on to its checkpoint and results instead of dying by SIGPIPE.
TEST(Signals, AClosedStdoutDoesNotEndARun) {
  Scratch s("sigpipe");
  const std::string config = write_config(s, "c.json", {"train.steps=200", "train.log_every=1", "eval.lengths=[8]"});
  const std::string cmd = std::string(POSENC_BINARY) + " train " + config + " --no-progress --out " + s.path("run") +
                          " 2>&1 | head -2 > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  // head returns at once; the run finishes on its own.
  EXPECT_TRUE(wait_for([&] { return fs::exists(s.path("run/results.json")); }, 120));
  EXPECT_TRUE(fs::exists(s.path("run/checkpoint.pt")));
}

// A warmup longer than the run changes the learning rate throughout: said, not silent.
TEST(Messages, AWarmupLongerThanTheRunIsSaid) {
  Scratch s("warmup");
  const std::string config = write_config(s, "c.json", {"train.steps=5", "train.warmup_steps=200", "eval.lengths=[8]"});
  const auto r = run_cli("train " + config + " --no-progress --out " + s.path("run"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("train.warmup_steps=200 is more than train.steps=5: the learning rate rises"),
            std::string::npos)
      << r.output;
}

TEST(EarlyChecks, CompareDoesNotTakeOverATrainRunsDirectory) {
  Scratch s("compare_on_run");
  const std::string config = write_config(s, "c.json", {"train.steps=2", "eval.lengths=[8]"});
  ASSERT_EQ(run_cli("train " + config + " --out " + s.path("run") + " --no-progress").code, 0);
  write_file_atomic(s.path("grid.json"), posenc::testing::tiny_grid().dump());
  const auto r = run_cli("compare " + s.path("grid.json") + " --out " + s.path("run"));
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "holds checkpoint.pt of another posenc command's output");
  EXPECT_FALSE(fs::exists(s.path("run/compare.lock")));
}

TEST(EarlyChecks, AUsersOwnMetricsFileIsNotTruncated) {
  Scratch s("own_metrics");
  const std::string config = write_config(s, "c.json", {"train.steps=2", "eval.lengths=[8]"});
  write_file_atomic(s.path("mine/metrics.jsonl"), "{\"my\": \"data\"}\n");
  const auto r = run_cli("train " + config + " --out " + s.path("mine") + " --no-progress");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "holds a metrics.jsonl but no posenc run");
  EXPECT_EQ(read_file(s.path("mine/metrics.jsonl")), "{\"my\": \"data\"}\n");
}

// ---------------------------------------------------------------- charlm text

TEST(CharLmText, AReplacedTextIsCaughtOnResumeWarnedOnEvalAndAMovedOneMayBeRepointed) {
  Scratch s("charlm_text");
  const auto write_text = [&](const std::string& path, const std::string& word) {
    std::ofstream out(path);
    for (int i = 0; i < 80; ++i) out << word;
  };
  write_text(s.path("corpus.txt"), "abcdefgh ");
  const std::string run = s.path("run"), ckpt = run + "/checkpoint.pt";
  const std::string train = "train " + std::string(POSENC_SOURCE_DIR) +
                            "/configs/charlm.json --no-progress --set task.path=" + s.path("corpus.txt") +
                            " --set task.min_length=16 --set task.max_length=16 --set model.d_model=16"
                            " --set model.heads=2 --set model.layers=1 --set model.d_ff=32 --set train.val_samples=4"
                            " --set eval.lengths=[16] --out " +
                            run;
  ASSERT_EQ(run_cli(train + " --set train.steps=4").code, 0);
  const json stored = read_json_file(run + "/config.json");
  EXPECT_EQ(stored["task"]["bytes"], 720);
  EXPECT_EQ(stored["task"]["checksum"].get<std::string>().size(), 16u);

  // The same text elsewhere: eval may be re-pointed to it; generate needs no text at all.
  fs::rename(s.path("corpus.txt"), s.path("moved.txt"));
  auto r = run_cli("generate " + ckpt + " --prompt ab --tokens 4");
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_cli("eval " + ckpt + " --lengths 16 --set task.path=" + s.path("moved.txt") + " --out " + s.path("e.json"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("has changed"), std::string::npos) << r.output;

  // Another text at the recorded path: eval warns, resume refuses, re-pointing to it is refused.
  write_text(s.path("corpus.txt"), "zyxwvuts ");
  r = run_cli("eval " + ckpt + " --lengths 16 --out " + s.path("e2.json"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(s.path("corpus.txt") + " has changed since the checkpoint was trained"), std::string::npos)
      << r.output;
  r = run_cli(train + " --set train.steps=6 --resume");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "is not the text " + ckpt + " was trained on (task.checksum");
  r = run_cli("eval " + ckpt + " --lengths 16 --set task.path=" + s.path("corpus.txt") + " --out " + s.path("e3.json"));
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "--set task.path: " + s.path("corpus.txt") + " is not the text");
  // heads reads the same text through the same checks: a warning for the text changed in place, a refusal for
  // another text re-pointed to, and the moved text accepted.
  r = run_cli("heads " + ckpt + " --lengths 16 --samples 2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(s.path("corpus.txt") + " has changed since the checkpoint was trained"), std::string::npos)
      << r.output;
  r = run_cli("heads " + ckpt + " --lengths 16 --samples 2 --set task.path=" + s.path("corpus.txt"));
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "--set task.path: " + s.path("corpus.txt") + " is not the text");
  r = run_cli("heads " + ckpt + " --lengths 16 --samples 2 --set task.path=" + s.path("moved.txt"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("has changed"), std::string::npos) << r.output;
  // The original text back: the resume goes on.
  fs::rename(s.path("moved.txt"), s.path("corpus.txt"));
  r = run_cli(train + " --set train.steps=6 --resume");
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(CharLmText, ARelativePathIsMadeAbsoluteAndADirectoryOrDeviceIsRefused) {
  const auto charlm_with_path = [](const std::string& path) {
    json j = read_json_file(std::string(POSENC_SOURCE_DIR) + "/configs/charlm.json");
    apply_override(j, "task.path=" + json(path).dump());
    return config_from_json(j);
  };
  EXPECT_EQ(charlm_with_path("corpus.txt").task.options.get_string("path"),
            (fs::current_path() / "corpus.txt").string());
  for (const std::string bad : {"/tmp", "/dev/zero"}) {
    try {
      make_task(charlm_with_path(bad).task)->check_eval_length(8);
      ADD_FAILURE() << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(bad == "/tmp" ? "it is a directory" : "not a regular file"),
                std::string::npos)
          << e.what();
    }
  }
}

// ---------------------------------------------------------------- generate

TEST(Generate, PrintsEveryByteKeepsTheTextOnSigtermAndRefusesWhatCannotFit) {
  Scratch s("generate");
  {
    std::ofstream out(s.path("corpus.txt"), std::ios::binary);
    for (int i = 0; i < 300; ++i) out << std::string("ab\0c", 4);  // NUL is valid UTF-8
  }
  const std::string run = s.path("run"), ckpt = run + "/checkpoint.pt";
  ASSERT_EQ(run_cli("train " + std::string(POSENC_SOURCE_DIR) +
                    "/configs/charlm.json --no-progress --set task.path=" + s.path("corpus.txt") +
                    " --set task.min_length=16 --set task.max_length=16 --set model.d_model=32 --set model.heads=2"
                    " --set model.layers=2 --set model.d_ff=64 --set train.steps=150 --set train.warmup_steps=20"
                    " --set train.val_samples=8 --set eval.lengths=[16] --out " +
                    run)
                .code,
            0);
  // Standard output holds every byte that --out holds, NUL bytes included.
  pid_t pid = posenc::testing::start_cli(
      {"generate", ckpt, "--prompt", "ab", "--tokens", "40", "--temperature", "0", "--out", s.path("g.txt")},
      s.path("log"));
  ASSERT_EQ(posenc::testing::wait_child(pid).code, 0) << read_file(s.path("log"));
  const std::string written = read_file(s.path("g.txt"));
  EXPECT_EQ(written.size(), 42u);
  EXPECT_NE(written.find('\0'), std::string::npos) << "the model should have learnt to emit NUL";
  EXPECT_NE(read_file(s.path("log")).find(written + "\n"), std::string::npos);

  // SIGTERM: what was generated so far is printed and written, and the exit status says it was stopped.
  pid = posenc::testing::start_cli(
      {"generate", ckpt, "--prompt", "ab", "--tokens", "200000", "--temperature", "0", "--out", s.path("long.txt")},
      s.path("log2"));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ::kill(pid, SIGTERM);
  const auto end = posenc::testing::wait_child(pid);
  const std::string log = read_file(s.path("log2"));
  EXPECT_EQ(end.code, 143) << log;
  EXPECT_NE(log.find("stopped by SIGTERM after"), std::string::npos) << log;
  ASSERT_TRUE(fs::exists(s.path("long.txt")));
  const std::string partial = read_file(s.path("long.txt"));
  EXPECT_LT(partial.size(), 200002u);
  EXPECT_EQ(partial.rfind("ab", 0), 0u);

  // An existing file is not replaced; a sequence that cannot fit in memory is refused up front.
  auto r = run_cli("generate " + ckpt + " --prompt ab --tokens 4 --out " + s.path("g.txt"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(read_file(s.path("g.txt")), written);
  r = run_cli("generate " + ckpt + " --prompt " + std::string(100000, 'a') + " --tokens 4");
  EXPECT_EQ(r.code, 2) << r.output.substr(0, 500);
  expect_one_line_error(r.output, "generating up to 100004 tokens needs about");
}

// ---------------------------------------------------------------- non-finite results

TEST(NonFinite, NaNOutputsAreFlaggedPerLengthNotReportedAsScores) {
  for (const std::string kind : {"encoder", "decoder"}) {
    Config cfg = small_config(
        "/tmp/unused", kind == "encoder" ? std::vector<std::string>{}
                                         : std::vector<std::string>{"task.type=\"copy\"", "model.kind=\"decoder\""});
    cfg.eval.samples_per_length = 16;
    const auto task = make_task(cfg.task);
    Transformer model(cfg.model, task->vocab_size());
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.fill_(std::numeric_limits<float>::quiet_NaN());
    }
    const auto results = evaluate_lengths(model, *task, evaluation_spec(cfg), {8}, torch::kCPU);
    ASSERT_EQ(results.size(), 1u);
    EXPECT_EQ(results[0].non_finite, results[0].total.n) << kind;
    const json j = json::parse(length_results_to_json(results)[0].dump());  // as results.json holds it
    EXPECT_EQ(j["non_finite"], results[0].total.n) << kind;
    // Every output NaN: no score at all (null, "nan"), never the 0.5 of a coin.
    EXPECT_TRUE(j[kind == "encoder" ? "accuracy" : "exact_match"].is_null()) << kind << ": " << j.dump();
    EXPECT_TRUE(j["ci95"][0].is_null()) << kind << ": " << j.dump();
    const std::string table = format_length_table(results, *task);
    EXPECT_NE(table.find("nan"), std::string::npos) << table;
    EXPECT_EQ(table.find("0.500"), std::string::npos) << table;
  }
}

// ---------------------------------------------------------------- outputs

TEST(Outputs, NoOutFlagReplacesACheckpointConfigOrResultsFile) {
  Scratch s("outputs");
  const std::string config = write_config(s, "c.json", {"train.steps=5", "eval.lengths=[8]"});
  const fs::path run = s.dir / "run";
  ASSERT_EQ(run_cli("train " + config + " --out " + run.string() + " --no-progress").code, 0);
  const std::string ckpt = (run / "checkpoint.pt").string();
  std::map<std::string, std::string> before;
  for (const auto* name : {"checkpoint.pt", "config.json", "results.json", "metrics.jsonl"})
    before[name] = read_file((run / name).string());
  for (const auto* name : {"checkpoint.pt", "config.json", "results.json", "metrics.jsonl"}) {
    const std::string target = (run / name).string();
    auto r = run_cli("eval " + ckpt + " --lengths 8 --samples 8 --out " + target);
    EXPECT_EQ(r.code, 2) << r.output;
    expect_one_line_error(r.output, "--out " + target + ": exists and was not written by posenc eval");
    r = run_cli("attention " + ckpt + " --length 8 --json " + target);
    EXPECT_EQ(r.code, 2) << r.output;
    expect_one_line_error(r.output, "--json " + target + ": exists and was not written by posenc attention");
    r = run_cli("inspect rope --json " + target);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(read_file(target), before[name]) << name << " was changed";
  }
  // A directory, a missing directory and a file of the system are refused before any work.
  auto r = run_cli("eval " + ckpt + " --out " + run.string());
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "is a directory");
  r = run_cli("eval " + ckpt + " --out " + s.path("missing/r.json"));
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "the directory " + s.path("missing") + " does not exist");
  r = run_cli("eval " + ckpt + " --out /proc/version");
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "--out /proc: outputs need a directory of their own");

  // What eval wrote itself (and eval files from before the marker) it may write again.
  ASSERT_EQ(run_cli("eval " + ckpt + " --lengths 8 --samples 8").code, 0);
  const std::string eval_file = (run / "results_eval.json").string();
  EXPECT_EQ(read_json_file(eval_file)["written_by"], "posenc eval");
  EXPECT_EQ(run_cli("eval " + ckpt + " --lengths 8 --samples 8 --out " + eval_file).code, 0);
  json older = read_json_file(eval_file);
  older.erase("written_by");
  write_file_atomic(eval_file, older.dump());
  EXPECT_EQ(run_cli("eval " + ckpt + " --lengths 8 --samples 8").code, 0);
  ASSERT_EQ(run_cli("inspect rope --json " + s.path("i.json")).code, 0);
  EXPECT_EQ(run_cli("inspect rope --json " + s.path("i.json")).code, 0);
  EXPECT_EQ(run_cli("eval " + ckpt + " --lengths 8 --out " + s.path("i.json")).code, 2);  // another command's file
  // Without --out, a refusal names the default place, not the flag that was not given.
  write_file_atomic(eval_file, R"({"mine": 1})");
  const auto r2 = run_cli("eval " + ckpt + " --lengths 8 --samples 8");
  EXPECT_EQ(r2.code, 2) << r2.output;
  expect_one_line_error(r2.output, "the default output (no --out given) " + eval_file + ": exists and was not written");
}

// compare's and bench's --out go through the guard every output flag does: a
// user's own files of the same names, another command's directory, a file and
// a directory that cannot be written are refused before any work, and nothing
// there changes.
TEST(Outputs, CompareAndBenchKeepAUsersFilesAndRefuseBeforeTheWork) {
  Scratch s("out_dirs");
  write_file_atomic(s.path("grid.json"), posenc::testing::tiny_grid().dump());
  write_file_atomic(s.path("mine/summary.md"), "my notes\n");
  auto r = run_cli("compare " + s.path("grid.json") + " --out " + s.path("mine") + " --no-progress");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "holds a summary.md that posenc compare did not write");
  EXPECT_EQ(read_file(s.path("mine/summary.md")), "my notes\n");
  EXPECT_FALSE(fs::exists(s.path("mine/runs")));
  EXPECT_FALSE(fs::exists(s.path("mine/compare.lock")));

  write_file_atomic(s.path("mine/bench.md"), "my table\n");
  write_file_atomic(s.path("afile"), "x");
  const std::string config = write_config(s, "c.json", {"train.steps=2", "eval.lengths=[8]"});
  ASSERT_EQ(run_cli("train " + config + " --out " + s.path("run") + " --no-progress").code, 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {s.path("mine"), "holds a bench.md that posenc bench did not write"},
      {s.path("afile"), "exists and is not a directory"},
      {s.path("run"), "holds checkpoint.pt of another posenc command's output"},
      {"/", "outputs need a directory of their own, not the filesystem's root"}};
  for (const auto& [out, why] : refused) {
    r = run_cli("bench --no-python --out " + out);
    EXPECT_EQ(r.code, 2) << out << ": " << r.output;
    expect_one_line_error(r.output, why);
  }
  EXPECT_EQ(read_file(s.path("mine/bench.md")), "my table\n");
  r = run_cli("compare " + s.path("grid.json") + " --out " + s.path("afile") + " --no-progress");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "exists and is not a directory");

  // A directory nothing can be written in (a read-only tmpfs; root may write
  // anywhere else): eval, compare and bench fail at once, before the work.
  const fs::path ro = s.dir / "ro";
  fs::create_directories(ro);
  if (::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a read-only tmpfs here (" << std::strerror(errno) << ")";
  const std::string ckpt = s.path("run/checkpoint.pt");
  const std::vector<std::string> commands = {
      "eval " + ckpt + " --lengths 8 --out " + (ro / "e.json").string(),
      "compare " + s.path("grid.json") + " --no-progress --out " + (ro / "cmp").string(),
      "bench --no-python --out " + (ro / "b").string()};
  std::vector<posenc::testing::CliRun> runs;
  for (const auto& command : commands) runs.push_back(run_cli(command));
  ::umount(ro.c_str());
  for (size_t i = 0; i < commands.size(); ++i) {
    EXPECT_EQ(runs[i].code, 2) << commands[i] << ": " << runs[i].output;
    expect_one_line_error(runs[i].output, "Read-only file system");
    EXPECT_EQ(runs[i].output.find("accuracy"), std::string::npos) << "evaluated before failing: " << runs[i].output;
  }
}

TEST(ExitCodes, EveryBadFlagValueOrFileExitsTwo) {
  Scratch s("exitcodes");
  const std::string config = write_config(s, "c.json", {"train.steps=2", "eval.lengths=[8]"});
  const fs::path run = s.dir / "run";
  ASSERT_EQ(run_cli("train " + config + " --out " + run.string() + " --no-progress").code, 0);
  const std::string ckpt = (run / "checkpoint.pt").string();
  const std::vector<std::string> bad = {
      "frobnicate",
      "",
      "train",
      "train " + s.path("missing.json"),
      "train " + config + " --threads 0",
      "train " + config + " --threads x",
      "train " + config + " --no-such-flag",
      "train " + config + " --set",
      "train " + config + " --device tpu",
      "eval " + ckpt + " --lengths 0",
      "eval " + ckpt + " --lengths 8,-1",
      "eval " + ckpt + " --samples 0",
      "eval " + ckpt + " --samples -3",
      "eval " + s.path("missing.pt"),
      "eval",
      "generate " + ckpt + " --prompt ''",
      "generate " + ckpt,
      "generate " + ckpt + " --prompt a --tokens 0",
      "generate " + ckpt + " --prompt a --temperature -1",
      "attention " + ckpt + " --length 0",
      "attention " + s.path("missing.pt"),
      "inspect nope",
      "inspect rope --length -1",
      "compare " + s.path("missing.json"),
      "compare " + config + " --jobs 0",
      "bench --threads 0",
      "list --bogus",
      "generate " + ckpt + " --prompt a --temperature nan",
      "generate " + ckpt + " --prompt a --temperature 1e-45",
      "train " + config + " --set model.positional.type=\"xpos\" --set model.positional.gamma=0",
      "eval " + ckpt + " --lengths 8,8",
      "train " + config + " --set train.steps=0",
  };
  for (const auto& args : bad) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << "posenc " << args << "\n" << r.output;
  }
  const auto r = run_cli("frobnicate");
  EXPECT_NE(r.output.find("unknown command \"frobnicate\""), std::string::npos) << r.output;
  EXPECT_EQ(run_cli("--help").code, 0);
  EXPECT_EQ(run_cli("train --help").code, 0);
}

// A flag that stands for a config key takes the key's declared bounds (cli integer_as_declared), not a copy of them.
TEST(ExitCodes, AFlagThatStandsForAConfigKeyTakesTheKeysDeclaredBounds) {
  Scratch s("declaredflags");
  // Any existing file passes a command's check that its checkpoint exists; the flag is refused as it is parsed.
  const std::string file = write_config(s, "c.json", {"train.steps=2"});
  struct Flag {
    std::string command, flag, key;
  };
  const std::vector<Flag> flags = {
      {"train " + file, "--threads", "train.threads"},
      {"compare " + file, "--threads", "train.threads"},
      {"eval " + file, "--threads", "train.threads"},
      {"generate " + file, "--threads", "train.threads"},
      {"bench", "--threads", "train.threads"},
      {"eval " + file, "--lengths", "eval.lengths"},
      {"heads " + file, "--lengths", "eval.lengths"},
      {"probe " + file, "--lengths", "eval.lengths"},
      {"eval " + file, "--samples", "eval.samples_per_length"},
  };
  for (const auto& f : flags) {
    const OptionSpec& spec = config_key(f.key);
    const std::string range = "[" + shown_bound(spec, spec.min) + ", " + shown_bound(spec, spec.max) + "]";
    for (const double outside : {spec.min - 1, spec.max + 1}) {
      const std::string args = f.command + " " + f.flag + " " + std::to_string(static_cast<int64_t>(outside));
      const auto r = run_cli(args);
      EXPECT_EQ(r.code, 2) << "posenc " << args << "\n" << r.output;
      EXPECT_NE(r.output.find("is out of range " + range), std::string::npos) << "posenc " << args << "\n" << r.output;
    }
  }
  // A list of lengths takes at most as many as eval.lengths does, across repeated flags too.
  const size_t max_lengths = config_key("eval.lengths").max_items;
  std::string most, one_more;
  for (size_t i = 0; i < max_lengths; ++i) most += (i ? "," : "") + std::to_string(2 + i);
  one_more = most + " --lengths " + std::to_string(2 + max_lengths);
  for (const std::string command : {"eval ", "heads ", "probe "}) {
    auto r = run_cli(command + file + " --lengths " + one_more);
    EXPECT_EQ(r.code, 2) << command << r.output;
    EXPECT_NE(r.output.find(std::to_string(max_lengths + 1) + " lengths, more than the " + std::to_string(max_lengths) +
                            " eval.lengths takes"),
              std::string::npos)
        << command << r.output;
  }
}

TEST(Messages, DamagedCheckpointsAndImpossibleLengthsNameTheFile) {
  Scratch s("ckptmsg");
  const std::string config = write_config(s, "c.json", {"train.steps=5", "eval.lengths=[8]"});
  const fs::path run = s.dir / "run";
  ASSERT_EQ(run_cli("train " + config + " --out " + run.string() + " --no-progress").code, 0);
  const std::string ckpt = (run / "checkpoint.pt").string();
  std::string bytes = read_file(ckpt);
  bytes[bytes.size() / 2] ^= 0x10;
  write_file_atomic(s.path("flipped.pt"), bytes);
  auto r = run_cli("eval " + s.path("flipped.pt"));
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, s.path("flipped.pt") + ": checkpoint is corrupted");

  // A length that cannot fit is refused before any length runs, quickly.
  const auto t0 = std::chrono::steady_clock::now();
  r = run_cli("eval " + ckpt + " --lengths 8,1000000 --out " + s.path("e.json"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "evaluation at length 1000000 needs about");
  EXPECT_FALSE(fs::exists(s.path("e.json")));
}

TEST(EvalSet, EvaluationTimeSchemeOptionsApplyAndParameterChangesAreRefused) {
  Scratch s("evalset");
  const std::string config = write_config(s, "c.json", {"train.steps=5", "eval.lengths=[8]"});
  const fs::path run = s.dir / "run";
  ASSERT_EQ(run_cli("train " + config + " --out " + run.string() + " --no-progress").code, 0);
  const std::string ckpt = (run / "checkpoint.pt").string();
  auto r = run_cli("eval " + ckpt +
                   " --lengths 8,32 --set model.positional.scaling=yarn --set model.positional.factor=4 "
                   "--set model.positional.original_max_position=9 --out " +
                   s.path("yarn.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = read_json_file(s.path("yarn.json"));
  EXPECT_EQ(j["positional"]["scaling"], "yarn");
  EXPECT_EQ(j["overrides"].size(), 3u);
  EXPECT_EQ(j["lengths"].size(), 2u);

  r = run_cli("eval " + ckpt + " --set model.d_model=16");
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "changes to model.attention.logn_from, ");
  expect_one_line_error(r.output, ", eval.*, task.eval_value_window, task.path (a moved copy of the same file) and ");
  r = run_cli("eval " + ckpt + " --set model.positional.type=alibi");
  EXPECT_EQ(r.code, 2);
  r = run_cli("eval " + ckpt + " --set model.positional.scaling=yarn");  // no original_max_position
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "needs model.positional.original_max_position");
  EXPECT_EQ(r.output.find("add or remove no parameter"), std::string::npos) << "a parameter is not the problem";
  // Randomized positions act on training batches only: nothing for eval to change.
  r = run_cli("eval " + ckpt + " --set model.positional.randomize.max_position=64");
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "randomized positions change only the training batches");

  // An option that adds parameters (alibi's directional offsets) cannot be switched on after training.
  const fs::path alibi = s.dir / "alibi";
  const std::string alibi_config =
      write_config(s, "alibi.json", {"train.steps=5", "eval.lengths=[8]", "model.positional={\"type\": \"alibi\"}"});
  ASSERT_EQ(run_cli("train " + alibi_config + " --out " + alibi.string() + " --no-progress").code, 0);
  r = run_cli("eval " + (alibi / "checkpoint.pt").string() + " --set model.positional.directional=true");
  EXPECT_EQ(r.code, 2);
  expect_one_line_error(r.output, "--set may change only options that add or remove no parameter");
  // Nor switched off: the model would be scored without weights it trained (FoX's gate weights, too).
  const std::vector<std::pair<std::string, std::string>> dropping = {
      {R"({"type": "alibi", "directional": true})", "directional=false"}, {R"({"type": "fox"})", "gate=constant"}};
  for (size_t i = 0; i < dropping.size(); ++i) {
    const auto& [scheme, option] = dropping[i];
    const fs::path trained = s.dir / ("trained" + std::to_string(i));
    const std::string cfg = write_config(s, "trained" + std::to_string(i) + ".json",
                                         {"train.steps=5", "eval.lengths=[8]", "model.positional=" + scheme});
    ASSERT_EQ(run_cli("train " + cfg + " --out " + trained.string() + " --no-progress").code, 0) << scheme;
    r = run_cli("eval " + (trained / "checkpoint.pt").string() + " --set model.positional." + option + " --out " +
                s.path("dropped.json"));
    EXPECT_EQ(r.code, 2) << option;
    expect_one_line_error(r.output, "--set may change only options that add or remove no parameter");
    EXPECT_FALSE(fs::exists(s.path("dropped.json")));
  }
}

}  // namespace POSENC_TEST_UNIT
