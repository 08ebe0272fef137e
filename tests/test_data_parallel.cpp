// One run on several processes (train/data_parallel.h, util/launch.h): the
// launch environment, two Gloo ranks against one process, stopping, resuming
// with another number of ranks, and a rank that dies.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <regex>
#include <thread>

#include <torch/cuda.h>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/errors.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/schedule.h"
#include "posenc/util/io.h"
#include "posenc/util/launch.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::expect_one_line_error;
using posenc::testing::logged_losses;
using posenc::testing::parameters_of;
using posenc::testing::run_cli;
using posenc::testing::Scratch;
using posenc::testing::wait_exit_within;
namespace fs = std::filesystem;

namespace {

using Env = std::map<std::string, std::string>;

Launch launch_from(const Env& env) {
  return read_launch([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string launch_error(const Env& env) {
  return posenc::testing::error_of([&] { launch_from(env); });
}

/// How far apart two runs' final weights are, in units of the farthest AdamW
/// can move one weight in those runs: the largest elementwise difference over
/// every tensor, divided by the sum of the learning rates of the steps taken
/// (AdamW's step on one weight is lr * m/(sqrt(v) + eps), and |m/sqrt(v)| is about
/// 1 or less). Differences are measured in the units of the updates rather than
/// of the weights because rounding perturbs updates: a LayerNorm bias of norm
/// 0.004 moves as far as a weight matrix of norm 5 does.
std::map<std::string, double> weight_differences(const fs::path& a, const fs::path& b, double lr_sum) {
  auto ma = load_model((a / "checkpoint.pt").string(), torch::kCPU);
  auto mb = load_model((b / "checkpoint.pt").string(), torch::kCPU);
  const auto pb = mb->named_parameters();
  std::map<std::string, double> out;
  for (const auto& p : ma->named_parameters()) {
    EXPECT_TRUE(pb.contains(p.key())) << p.key();
    if (pb.contains(p.key())) out[p.key()] = (p.value() - pb[p.key()]).abs().max().item<double>() / lr_sum;
  }
  return out;
}

/// The sum of the learning rates of a run's steps (train/schedule.h).
double learning_rate_sum(const Config& c) {
  double sum = 0;
  for (int64_t step = 0; step < c.train.steps; ++step)
    sum += learning_rate(step, c.train.steps, c.train.lr, c.train.warmup_steps, c.train.min_lr_ratio);
  return sum;
}

/// One process against two ranks. The error model: the ranks' averaged
/// gradient is the one process's gradient summed in another order, a relative
/// difference of about 1e-7 per step (float32's unit roundoff 6e-8 times a few,
/// measured 2e-7 to 1e-6 on the LayerNorm biases, OpenBLAS Haswell and SkylakeX
/// kernels alike). Where the loss is smooth in the weights, that perturbation
/// stays small:
///  - a logged loss (a mean over at least 256 predictions) agrees to 1e-5,
///    relative, 10x the largest difference measured over 60 steps;
///  - the final weights agree to 1e-3 of the farthest AdamW can move a weight
///    (`weight_differences`), 10x the largest measured (9e-5 under the Haswell
///    and SkylakeX kernels and ATen's default path: the key bias of
///    self-attention, whose gradient RoPE makes small but not zero, so Adam's
///    division by sqrt(v) scales its rounding up). A rank that trained on the
///    wrong slice, or skipped the all-reduce, moves weights by a sizeable
///    fraction of that distance.
/// `loose` names the tensors whose true gradient is exactly zero (see the test)
/// and their tolerance.
void expect_same_training(const fs::path& one, const fs::path& two, const std::map<std::string, double>& loose = {}) {
  const auto a = logged_losses(one), b = logged_losses(two);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [step, loss] : a) {
    ASSERT_TRUE(b.count(step)) << "step " << step;
    EXPECT_NEAR(b.at(step), loss, 1e-5 * std::abs(loss)) << "step " << step;
  }
  const Config c = config_from_json(read_json_file((one / "config.json").string()));
  for (const auto& [name, difference] : weight_differences(one, two, learning_rate_sum(c))) {
    double tolerance = 1e-3;
    for (const auto& [fragment, t] : loose)
      if (name.find(fragment) != std::string::npos) tolerance = t;
    EXPECT_LT(difference, tolerance) << name << ", in units of the farthest AdamW moves a weight";
  }
}

/// The pid of each rank, from the launcher's "started N ranks (rank 0 pid X, ...)" line.
std::map<int, pid_t> rank_pids(const std::string& log_path) {
  std::map<int, pid_t> out;
  std::ifstream in(log_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::regex re("rank (\\d+) pid (\\d+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out[std::stoi((*it)[1])] = static_cast<pid_t>(std::stol((*it)[2]));
  return out;
}

/// Waits (at most 120 s) until the run has logged a training step.
bool wait_for_training(const fs::path& run) {
  for (int i = 0; i < 1200; ++i) {
    if (fs::exists(run / "metrics.jsonl") && !logged_losses(run).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace

TEST(Launch, ReadsTorchrunsVariables) {
  const Launch l = launch_from(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29400"}});
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.master_addr, "n1");
  EXPECT_EQ(l.master_port, 29400);
  EXPECT_TRUE(l.distributed());
  EXPECT_FALSE(launch_from({}).distributed());
}

TEST(Launch, ReadsAnSrunStepButNotTheBatchScriptAroundIt) {
  const Env batch = {{"SLURM_PROCID", "0"},
                     {"SLURM_NTASKS", "2"},
                     {"SLURM_LOCALID", "0"},
                     {"SLURM_JOB_ID", "77"},
                     {"SLURM_JOB_NODELIST", "gpu[07-08]"}};
  EXPECT_FALSE(launch_from(batch).distributed()) << "sbatch -n 2's script is one process, not rank 0 of 2";
  Env step = batch;
  step["SLURM_STEP_ID"] = "3";
  step["SLURM_PROCID"] = "1";
  step["SLURM_LOCALID"] = "1";
  step["SLURM_STEP_NUM_TASKS"] = "2";
  step["SLURM_STEP_NODELIST"] = "gpu[07-08]";
  const Launch l = launch_from(step);
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.world_size, 2);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.master_addr, "gpu07");
  EXPECT_EQ(l.master_port, slurm_step_port(77, 3));
  step["MASTER_PORT"] = "31000";
  EXPECT_EQ(launch_from(step).master_port, 31000);
  step["RANK"] = "0";  // torchrun's variables win
  step["WORLD_SIZE"] = "1";
  EXPECT_FALSE(launch_from(step).distributed());
}

TEST(Launch, StepPortsStayBelowTheEphemeralRangeAndApartForNearbyJobs) {
  // Every step of the jobs that can share a node at one time (ids within 1,000
  // of each other, steps 0-4) gets its own port, below 32768, where the kernel
  // takes no port for outgoing connections.
  std::set<int> ports;
  for (int64_t job = 2'000'000; job < 2'001'000; ++job)
    for (int64_t step = 0; step < 5; ++step) {
      const int port = slurm_step_port(job, step);
      EXPECT_GE(port, 20000);
      EXPECT_LT(port, 32768);
      ports.insert(port);
    }
  EXPECT_EQ(ports.size(), 5000u) << "two steps of nearby jobs share a port";
  for (int64_t step = 0; step < 8; ++step)  // steps 0-7, in both orders
    for (int64_t other = 0; other < 8; ++other)
      for (int64_t apart = step == other ? 1 : 0; apart < 1291; ++apart)
        ASSERT_NE(slurm_step_port(5000, step), slurm_step_port(5000 + apart, other))
            << "step " << step << " and step " << other << " of a job " << apart << " later";
  EXPECT_NE(slurm_step_port(77, 0), slurm_step_port(2077, 0)) << "job ids 2000 apart met under the old formula";
  EXPECT_EQ(slurm_step_port(77, 0), slurm_step_port(77 + 12768, 0)) << "the range wraps after 12,768 jobs";
}

TEST(Launch, FirstHostOfASlurmNodeList) {
  EXPECT_EQ(first_slurm_host("vm"), "vm");
  EXPECT_EQ(first_slurm_host("node[003-005,9],gpu1"), "node003");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("rack2-n[12,4]-ib"), "rack2-n12-ib");
  for (const char* bad : {"", "n[", "n[]", "n[x-2]", "n]1["}) EXPECT_THROW(first_slurm_host(bad), ConfigError) << bad;
}

TEST(Launch, InconsistentVariablesAreNamed) {
  EXPECT_NE(launch_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1234"}})
                .find("WORLD_SIZE=2 without MASTER_ADDR"),
            std::string::npos);
  EXPECT_NE(launch_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("without MASTER_PORT"),
            std::string::npos);
  EXPECT_NE(launch_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=\"2\" is not a whole number in [0, 1]"),
            std::string::npos);
  EXPECT_NE(launch_error({{"WORLD_SIZE", "two"}}).find("WORLD_SIZE=\"two\""), std::string::npos);
  EXPECT_NE(launch_error({{"RANK", "0"}}).find("WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(launch_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT=\"70000\""),
            std::string::npos);
}

// The bar: two Gloo ranks, each training on half of every batch, reproduce one
// process (losses at every log line and the final weights within 1e-5
// relative), for the classifier and for a decoder task, with validation split
// over the ranks giving the same accuracy.
// The ordering case pools by the mean, not the default max: max pooling sends
// a feature's gradient to its largest position, so two positions within a
// rounding error of each other (1e-8) swap under the 1e-7 perturbation above,
// and the gradient jumps. Measured with OpenBLAS's SkylakeX kernels (what an
// AVX-512 machine picks), seed 0: the weights of 1 and 2 ranks agreed to 1e-8
// until step 26, where the gradient of blocks.0.ln1.bias differed by 1% (a
// swap); from there the runs drifted apart to 1e-3 of that tensor. Max-pooled
// runs of 1 and 2 ranks are equally good models, not the same one.
TEST(DataParallel, TwoGlooRanksMatchOneProcess) {
  POSENC_SKIP_WITHOUT_GLOO();
  Scratch s("dp_match");
  // SCAN's answers are padded: the ranks' slices score different numbers of tokens.
  for (const std::string task : {"ordering", "copy", "scan"}) {
    // On the CPU (Gloo) also where a GPU is visible: one GPU serves one rank only.
    std::vector<std::string> extra = {"train.steps=60",        "train.log_every=10",
                                      "train.eval_every=30",   "train.checkpoint_every=1000",
                                      "train.val_samples=100", "train.device=\"cpu\""};
    if (task == "ordering") extra.push_back("model.pooling=\"mean\"");
    if (task == "copy") extra.insert(extra.end(), {"task.type=\"copy\"", "model.kind=\"decoder\""});
    std::string cfg = posenc::testing::write_config(s, task + ".json", extra);
    if (task == "scan") {  // the small config's task options are ordering's
      auto j = read_json_file(cfg);
      j["task"] = {{"type", "scan"}, {"min_length", 2}, {"max_length", 22}};
      j["model"]["kind"] = "encoder_decoder";
      j["eval"]["lengths"] = {8, 24};
      j["eval"]["samples_per_length"] = 50;
      write_file_atomic(cfg, j.dump(2));
    }
    const auto one = s.dir / (task + "-one"), two = s.dir / (task + "-two");
    const auto a = run_cli("train " + cfg + " --no-progress --out " + one.string());
    ASSERT_EQ(a.code, 0) << a.output;
    const auto b = run_cli("train " + cfg + " --no-progress --nproc 2 --out " + two.string());
    ASSERT_EQ(b.code, 0) << b.output;
    SCOPED_TRACE(task);
    // The encoder_decoder's cross-attention has no positional scheme, so adding
    // the key bias adds the same q.b to every score of a query, which the
    // softmax cancels: that bias's true gradient is exactly zero, its computed
    // one is rounding, and Adam turns rounding into steps of up to lr with a
    // random sign. Measured: 1.7e-3 of the AdamW distance (decoder_blocks.*.cross_kv.bias);
    // a random walk of 60 such steps could reach sqrt(60)/60 = 0.13 of it.
    if (task == "scan")
      expect_same_training(one, two, {{"cross_kv.bias", 0.13}});
    else
      expect_same_training(one, two);
    const auto ra = read_json_file((one / "results.json").string()),
               rb = read_json_file((two / "results.json").string());
    EXPECT_EQ(ra.at("val_accuracy"), rb.at("val_accuracy"));
    EXPECT_EQ(rb.at("ranks"), 2);
    EXPECT_EQ(ra.at("lengths"), rb.at("lengths"));
  }
}

// SIGTERM to one rank (not the launcher) stops both at the same step, rank 0
// writes one checkpoint, and the run resumes on one process (another number of
// ranks) to the same weights as a run that was never stopped.
TEST(DataParallel, SigtermToOneRankStopsAllAndTheRunResumesOnOneProcess) {
  POSENC_SKIP_WITHOUT_GLOO();
  Scratch s("dp_stop");
  // A run far longer than the test waits (so the signal always lands before
  // the end, however busy the machine), with a flat schedule after warm-up
  // (min_lr_ratio=1), so that the stopped run resumed to a total a little past
  // the stop follows the same learning rates as a straight run to that total.
  const std::string cfg = posenc::testing::write_config(
      s, "c.json",
      {"train.steps=100000", "train.log_every=10", "train.eval_every=100000", "train.checkpoint_every=100000",
       "train.min_lr_ratio=1", "eval.lengths=[8]", "train.device=\"cpu\""});
  const auto run = s.dir / "run", straight = s.dir / "straight";
  const std::string log = s.path("launcher.log");
  const pid_t launcher =
      posenc::testing::start_cli({"train", cfg, "--no-progress", "--nproc", "2", "--out", run.string()}, log);
  ASSERT_TRUE(wait_for_training(run)) << read_file(log);
  const auto pids = rank_pids(log);
  ASSERT_EQ(pids.size(), 2u) << read_file(log);
  ::kill(pids.at(1), SIGTERM);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  const std::string out = read_file(log);
  EXPECT_EQ(exit_status(status), 143) << out;
  ASSERT_TRUE(fs::exists(run / "checkpoint.pt")) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("stopped by SIGTERM at step (\\d+)"))) << out;
  const int64_t stopped_at = std::stoll(m[1]);
  EXPECT_EQ(out.find("error"), std::string::npos) << "a rank that went on would fail its next all-reduce:\n" << out;
  EXPECT_EQ(logged_losses(run).rbegin()->first, stopped_at / 10 * 10);
  EXPECT_FALSE(fs::exists(run / "results.json"));
  // Resumed on one process to a total past the stop; the straight run never had two ranks.
  const std::string steps = " --set train.steps=" + std::to_string(stopped_at + 23);
  const auto resumed = run_cli("train " + cfg + " --no-progress --resume --out " + run.string() + steps);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  ASSERT_EQ(run_cli("train " + cfg + " --no-progress --out " + straight.string() + steps).code, 0);
  expect_same_training(straight, run);
}

// Ctrl-C on the terminal reaches the launcher alone (the ranks have process
// groups of their own), which passes it on as the same signal: every rank
// stops at one step, checkpoints, and the command exits 130, as one process does.
TEST(DataParallel, CtrlCToTheLauncherStopsEveryRankAsSigint) {
  POSENC_SKIP_WITHOUT_GLOO();
  Scratch s("dp_ctrl_c");
  const std::string cfg =
      posenc::testing::write_config(s, "c.json",
                                    {"train.steps=100000", "train.log_every=10", "train.eval_every=100000",
                                     "train.checkpoint_every=100000", "eval.lengths=[8]", "train.device=\"cpu\""});
  const auto run = s.dir / "run";
  const std::string log = s.path("launcher.log");
  const pid_t launcher =
      posenc::testing::start_cli({"train", cfg, "--no-progress", "--nproc", "2", "--out", run.string()}, log);
  ASSERT_TRUE(wait_for_training(run)) << read_file(log);
  ::kill(launcher, SIGINT);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  const std::string out = read_file(log);
  EXPECT_EQ(exit_status(status), 130) << out;
  EXPECT_NE(out.find("stopped by SIGINT at step"), std::string::npos) << out;
  EXPECT_EQ(out.find("SIGTERM"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(run / "checkpoint.pt")) << out;
}

// A rank killed outright: the other fails on its own (not killed by a
// launcher) well within a minute, with an error that names the lost rank.
TEST(DataParallel, AKilledRankEndsTheOtherWithAnErrorNamingIt) {
  POSENC_SKIP_WITHOUT_GLOO();
  Scratch s("dp_kill");
  const std::string cfg =
      posenc::testing::write_config(s, "c.json", {"train.steps=100000", "train.log_every=10", "train.device=\"cpu\""});
  const int port = free_local_port();
  std::vector<pid_t> ranks;
  for (int r = 0; r < 2; ++r) {
    std::string error;
    const pid_t pid =
        spawn_child({POSENC_BINARY, "train", cfg, "--no-progress", "--out", s.path("run")},
                    local_rank_environment(r, 2, port), s.path("rank" + std::to_string(r) + ".log"), &error);
    ASSERT_GT(pid, 0) << error;
    ranks.push_back(pid);
  }
  ASSERT_TRUE(wait_for_training(s.dir / "run")) << read_file(s.path("rank0.log"));
  ::kill(ranks[1], SIGKILL);
  ::waitpid(ranks[1], nullptr, 0);
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(ranks[0], &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (done == 0) {
    ::kill(ranks[0], SIGKILL);
    ::waitpid(ranks[0], nullptr, 0);
    FAIL() << "rank 0 still running 60 s after rank 1 was killed:\n" << read_file(s.path("rank0.log"));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("rank 0 ended %.2f s after rank 1 was killed\n", seconds);
  const std::string out = read_file(s.path("rank0.log"));
  EXPECT_EQ(exit_status(status), 1) << out;
  // The kill lands in whichever collective rank 0 is waiting on: the gradient
  // all-reduce on most steps, the sum of the logged tallies every log_every
  // steps. Each names itself; what matters is that rank 0 says which rank.
  expect_one_line_error(out, "with the other ranks failed");
  EXPECT_NE(out.find("error: rank 0: "), std::string::npos) << out;
  EXPECT_NE(out.find("(rank 1 ended, hung or lost its connection"), std::string::npos) << out;
}

// On CUDA each rank takes a GPU of its own and the ranks meet over NCCL. A
// machine with one GPU refuses --nproc 2 before any rank starts (NCCL itself
// refuses two ranks on one GPU); with two or more, two ranks train over NCCL.
TEST(DataParallel, OnCudaEachRankTakesAGpuAndTheRanksMeetOverNccl) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Scratch s("dp_nccl");
  const std::string cfg =
      posenc::testing::write_config(s, "c.json", {"train.steps=20", "train.log_every=10", "eval.lengths=[8]"});
  const std::string args = "train " + cfg + " --no-progress --device cuda --set train.backend=nccl --nproc 2";
  const int gpus = static_cast<int>(torch::cuda::device_count());
  auto r = run_cli(args + " --out " + s.path("run"));
  if (gpus < 2) {
    EXPECT_EQ(r.code, 2) << r.output;
    expect_one_line_error(r.output,
                          "this machine has " + std::to_string(gpus) + " CUDA device(s), and each rank takes one");
    EXPECT_FALSE(fs::exists(s.path("run/config.json")));
    GTEST_SKIP() << "two ranks over NCCL need two GPUs; this machine has " << gpus
                 << " (the refusal of --nproc 2 was checked)";
  }
  if (r.output.find("built without NCCL") != std::string::npos)
    GTEST_SKIP() << "this posenc was built without NCCL: " << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  const auto results = read_json_file(s.path("run/results.json"));
  EXPECT_EQ(results["ranks"].get<int>(), 2);
  EXPECT_NE(r.output.find("ranks=2 backend=nccl"), std::string::npos) << r.output;
}

TEST(DataParallel, BadLaunchesAreOneLineErrors) {
  Scratch s("dp_bad");
  const std::string cfg = posenc::testing::write_config(s, "c.json", {"train.steps=5"});
  const std::string args = "train " + cfg + " --no-progress --out " + s.path("run");
  // A batch that does not split evenly.
  auto r = run_cli(args + " --nproc 3");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "train.batch_size=32 does not divide among the 3 ranks");
  // A backend that cannot serve the device: refused by the launcher, before any rank starts.
  r = run_cli(args + " --set train.backend=nccl --device cpu --nproc 2");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "train.backend=nccl serves CUDA devices only");
  EXPECT_EQ(r.output.find("started"), std::string::npos) << r.output;
  if (!posenc::backend_built(posenc::CollectiveBackend::Gloo)) {
    // Nor does one rank start where this build lacks the backend.
    r = run_cli(args + " --set train.backend=gloo --device cpu --nproc 2");
    EXPECT_EQ(r.code, 2) << r.output;
    expect_one_line_error(r.output, "this posenc was built without Gloo");
    EXPECT_EQ(r.output.find("started"), std::string::npos) << r.output;
  }
  POSENC_SKIP_WITHOUT_GLOO();  // the rest are one rank's launches on the CPU
  // torchrun's variables without the rendezvous address.
  r = run_cli(args, "RANK=0 WORLD_SIZE=2 MASTER_PORT=29999");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "WORLD_SIZE=2 without MASTER_ADDR");
  // A port that another program holds: rank 0 cannot serve the rendezvous there.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string held = std::to_string(ntohs(addr.sin_port));
  r = run_cli(args, "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + held);
  ::close(fd);
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "MASTER_PORT=" + held + ": the port is already in use");
  // A name that does not resolve (.invalid never does) fails at once, not after collective_timeout_s of retries.
  const auto start = std::chrono::steady_clock::now();
  r = run_cli(args, "RANK=1 WORLD_SIZE=2 MASTER_ADDR=rank-zero.invalid MASTER_PORT=29998");
  EXPECT_EQ(r.code, 2) << r.output;
  expect_one_line_error(r.output, "MASTER_ADDR=rank-zero.invalid: the name does not resolve");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << "waited for the timeout";
}

/// An IPv4 address of this machine other than loopback ("" if it has none).
std::string non_loopback_address() {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string found;
  for (const ifaddrs* a = all; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_LOOPBACK) ||
        !(a->ifa_flags & IFF_UP))
      continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
  }
  ::freeifaddrs(all);
  return found;
}

// Gloo binds each rank to the address of its machine's own name, and where
// that name resolves to nothing, LibTorch falls back to loopback, which the
// other machines cannot reach: the ranks then failed and blamed each other.
// Such a rank binds instead to the address from which it reaches MASTER_ADDR,
// and says so.
TEST(DataParallel, ARankWhoseOwnHostNameDoesNotResolveBindsWhereItReachesRankZero) {
  POSENC_SKIP_WITHOUT_GLOO();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to give the ranks a host name of their own (unshare --uts)";
  const std::string address = non_loopback_address();
  if (address.empty()) GTEST_SKIP() << "this machine has no IPv4 address besides loopback";
  Scratch s("dp_own_name");
  // On the CPU (Gloo): both ranks run on this host, and on a GPU machine
  // train.device auto would put both on its one GPU.
  const std::string cfg = posenc::testing::write_config(s, "c.json", {"train.steps=5", "train.device=\"cpu\""});
  const std::string train = std::string(POSENC_BINARY) + " train " + cfg + " --no-progress --out " + s.path("run");
  const std::string script =
      "hostname posenc-rank-host.invalid || exit 77\n"
      "export WORLD_SIZE=2 MASTER_ADDR=" +
      address + " MASTER_PORT=" + std::to_string(free_local_port()) + "\n" + "RANK=0 timeout 120 " + train + " >" +
      s.path("rank0.log") + " 2>&1 &\n" + "RANK=1 timeout 120 " + train + " >" + s.path("rank1.log") +
      " 2>&1; one=$?\n" +
      "wait $!; zero=$?\n"
      "echo \"$zero $one\"\n";
  std::string out;
  if (posenc::run_command({"unshare", "--uts", "sh", "-c", script}, out) == 77 || out.find("unshare") == 0)
    GTEST_SKIP() << "cannot set a host name here: " << out;
  EXPECT_EQ(out, "0 0\n") << "exit codes of rank 0 and rank 1";
  for (const char* log : {"rank0.log", "rank1.log"}) {
    const std::string text = read_file(s.path(log));
    const std::string rank = std::string("rank ") + log[4];
    EXPECT_NE(text.find(rank +
                        ": this machine's own name \"posenc-rank-host.invalid\" gives no address that other "
                        "machines can reach (none, or loopback); Gloo binds to " +
                        address + ", the address from which it reaches MASTER_ADDR"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("loopback address as fallback"), std::string::npos) << text;
  }
}

/// Two network namespaces joined by a veth pair, each with its own address:
/// two "hosts" on one machine, for ranks that talk over a real interface.
/// Removed (with the pair) on destruction. `error` says why it could not be made.
struct TwoHosts {
  std::string ip, a, b, address_a, address_b, error;
  TwoHosts() {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
      if (::access(p, X_OK) == 0) ip = p;
    if (ip.empty()) {
      error = "no ip command (iproute2)";
      return;
    }
    const std::string id = std::to_string(::getpid() % 100000);
    a = "posenc" + id + "a", b = "posenc" + id + "b";
    const std::string subnet = "10.213." + std::to_string(::getpid() % 250) + ".";
    address_a = subnet + "1", address_b = subnet + "2";
    const std::string va = "pe" + id + "x", vb = "pe" + id + "y";
    const std::string script = "set -e\n" + ip + " netns add " + a + "\n" + ip + " netns add " + b + "\n" + ip +
                               " link add " + va + " type veth peer name " + vb + "\n" + ip + " link set " + va +
                               " netns " + a + "\n" + ip + " link set " + vb + " netns " + b + "\n" + ip + " -n " + a +
                               " addr add " + address_a + "/24 dev " + va + "\n" + ip + " -n " + b + " addr add " +
                               address_b + "/24 dev " + vb + "\n" + "for n in " + a + " " + b + "; do " + ip +
                               " -n $n link set lo up; done\n" + ip + " -n " + a + " link set " + va + " up\n" + ip +
                               " -n " + b + " link set " + vb + " up\n";
    std::string out;
    if (posenc::run_command({"sh", "-c", script}, out) != 0) error = "cannot make two network namespaces: " + out;
  }
  ~TwoHosts() {
    std::string out;
    if (!a.empty()) posenc::run_command({"sh", "-c", ip + " netns del " + a + "; " + ip + " netns del " + b}, out);
  }
  /// Starts `posenc ARGS` as `rank` of two inside host a (rank 0) or b (rank 1).
  pid_t start_rank(int rank, const std::vector<std::string>& args, int port, const std::string& log) const {
    std::vector<std::string> argv = {ip, "netns", "exec", rank == 0 ? a : b, POSENC_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string why;
    return spawn_child(argv,
                       {"RANK=" + std::to_string(rank), "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=" + address_a,
                        "MASTER_PORT=" + std::to_string(port)},
                       log, &why);
  }
};

// Every c10d path so far ran over loopback. Here each rank has its own network
// namespace and address, joined by a veth pair, as two nodes are: the
// rendezvous, the all-reduce, a stop and a rank's death all cross a real
// interface. Runs as root (CI); skipped elsewhere.
TEST(DataParallel, TwoRanksOnTwoHostsTrainStopAndSurviveADeathOverARealInterface) {
  POSENC_SKIP_WITHOUT_GLOO();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to make two network namespaces";
  const TwoHosts hosts;
  if (!hosts.error.empty()) GTEST_SKIP() << hosts.error;
  Scratch s("dp_two_hosts");
  // 1. Training: the same as one process. On the CPU, over Gloo: the two
  // "hosts" share this machine, and on a GPU machine its one GPU.
  const std::string cfg =
      posenc::testing::write_config(s, "c.json", {"train.steps=40", "train.log_every=10", "train.device=\"cpu\""});
  ASSERT_EQ(run_cli("train " + cfg + " --no-progress --out " + s.path("one")).code, 0);
  const std::vector<std::string> args = {"train", cfg, "--no-progress", "--out", s.path("two")};
  int port = free_local_port();
  const pid_t r1 = hosts.start_rank(1, args, port, s.path("train1.log"));
  const pid_t r0 = hosts.start_rank(0, args, port, s.path("train0.log"));
  ASSERT_GT(r0, 0);
  ASSERT_GT(r1, 0);
  EXPECT_EQ(wait_exit_within(r0, 120), 0) << read_file(s.path("train0.log"));
  EXPECT_EQ(wait_exit_within(r1, 120), 0) << read_file(s.path("train1.log"));
  expect_same_training(s.dir / "one", s.dir / "two");

  // 2. SIGTERM to rank 1's host stops both at one step; rank 0 checkpoints.
  const std::string endless = posenc::testing::write_config(
      s, "endless.json",
      {"train.steps=100000000", "train.log_every=10", "train.checkpoint_every=100000000", "train.device=\"cpu\""});
  const std::vector<std::string> endless_args = {"train", endless, "--no-progress", "--out", s.path("stopped")};
  port = free_local_port();
  pid_t ranks[2] = {hosts.start_rank(0, endless_args, port, s.path("stop0.log")),
                    hosts.start_rank(1, endless_args, port, s.path("stop1.log"))};
  ASSERT_TRUE(wait_for_training(s.dir / "stopped")) << read_file(s.path("stop0.log"));
  ::kill(ranks[1], SIGTERM);
  EXPECT_EQ(wait_exit_within(ranks[1], 60), 143) << read_file(s.path("stop1.log"));
  EXPECT_EQ(wait_exit_within(ranks[0], 60), 143) << read_file(s.path("stop0.log"));
  EXPECT_NE(read_file(s.path("stop0.log")).find("stopped by SIGTERM at step"), std::string::npos)
      << read_file(s.path("stop0.log"));
  EXPECT_TRUE(fs::exists(s.dir / "stopped" / "checkpoint.pt"));

  // 3. Rank 1 killed: rank 0 ends with an error that names it, within a minute.
  const std::vector<std::string> killed_args = {"train", endless, "--no-progress", "--out", s.path("killed")};
  port = free_local_port();
  ranks[0] = hosts.start_rank(0, killed_args, port, s.path("kill0.log"));
  ranks[1] = hosts.start_rank(1, killed_args, port, s.path("kill1.log"));
  ASSERT_TRUE(wait_for_training(s.dir / "killed")) << read_file(s.path("kill0.log"));
  ::kill(ranks[1], SIGKILL);
  ::waitpid(ranks[1], nullptr, 0);
  EXPECT_EQ(wait_exit_within(ranks[0], 60), 1) << read_file(s.path("kill0.log"));
  EXPECT_NE(read_file(s.path("kill0.log")).find("(rank 1 ended, hung or lost its connection"), std::string::npos)
      << read_file(s.path("kill0.log"));
}

// The bar's cluster half: `srun -n 2 posenc train` on a real Slurm (the
// one-node cluster of scripts/slurm-local.sh in CI) makes two Gloo ranks from
// the step's variables, and they agree with one process.
TEST(DataParallel, AnSrunStepOfTwoTasksTrainsLikeOneProcess) {
  POSENC_SKIP_WITHOUT_GLOO();
  if (!posenc::testing::slurm_cluster_up())
    GTEST_SKIP() << "no Slurm cluster here (scripts/slurm-local.sh start, then SLURM_CONF)";
  Scratch s("dp_srun");
  // Two tasks on one node: Gloo ranks on the CPU, which a GPU node would not be without the pin.
  const std::string cfg =
      posenc::testing::write_config(s, "c.json", {"train.steps=40", "train.log_every=10", "train.device=\"cpu\""});
  const auto one = s.dir / "one", two = s.dir / "two";
  ASSERT_EQ(run_cli("train " + cfg + " --no-progress --out " + one.string()).code, 0);
  std::string out;
  const int code = posenc::run_command(
      {"srun", "-n", "2", "-t", "10", POSENC_BINARY, "train", cfg, "--no-progress", "--out", two.string()}, out);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("ranks=2 backend=gloo (launched by srun)"), std::string::npos) << out;
  expect_same_training(one, two);
}

}  // namespace POSENC_TEST_UNIT
