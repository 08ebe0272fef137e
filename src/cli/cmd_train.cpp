// posenc train CONFIG [--set path=value ...] [--out DIR] [--resume] [--nproc N]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/environment.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/tasks/registry.h"
#include "posenc/train/data_parallel.h"
#include "posenc/train/fits.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/launch.h"
#include "posenc/util/process.h"

namespace posenc::cli {

void setup_train(CLI::App& app, TrainOptions& o) {
  app.add_option("config", o.config, "JSON config (e.g. configs/ordering.json)")->required()->check(CLI::ExistingFile);
  app.add_option("--set", o.overrides, "override a config value: path=value (repeatable), e.g. train.steps=2000")
      ->allow_extra_args(false);
  app.add_option("--out", o.out, "run directory (overrides train.out_dir)")->check(non_empty_utf8());
  app.add_option("--device", o.device, "auto | cpu | cuda (overrides train.device)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "intra-op threads (overrides train.threads)")
      ->check(integer_as_declared("train.threads"));
  // --resume alone (CLI11 gives it the default_str, "yes"), or --resume=auto.
  app.add_option("--resume", o.resume,
                 "continue the run in the run directory from its checkpoint; --resume=auto: continue it if the "
                 "directory holds a checkpoint, else start it (for jobs that a cluster may requeue)")
      ->expected(0, 1)
      ->default_str("yes")
      ->option_text("[=auto]")
      ->check([](const std::string& v) {
        return v.empty() || v == "yes" || v == "auto"
                   ? std::string()
                   : "takes no value (continue the run) or =auto (continue it if there is a "
                     "checkpoint, else start it), not \"" +
                         v + "\"; give the config before it";
      });
  app.add_flag("--no-progress", o.no_progress, "log lines instead of the updating progress line");
  app.add_option("--nproc", o.nproc,
                 "train one model on N local processes (data parallel, as torchrun --standalone "
                 "--nproc-per-node N): Gloo on the CPU, NCCL with one GPU per process")
      ->check(integer_in(1, 1024));
}

namespace {

/// SLURM_CPUS_PER_TASK (sbatch/srun --cpus-per-task) where it is a count of
/// 1..1024, else 0.
int slurm_cpus_per_task() {
  const char* value = std::getenv("SLURM_CPUS_PER_TASK");
  if (value == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || n < 1 || n > 1024) {
    spdlog::warn("SLURM_CPUS_PER_TASK={} is not a count of CPUs; train.threads stays the config's", value);
    return 0;
  }
  return static_cast<int>(n);
}

/// The --set overrides plus those of --out, --device and --threads (or, under
/// Slurm without --threads, SLURM_CPUS_PER_TASK).
std::vector<std::string> train_overrides(const TrainOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  if (!o.out.empty()) overrides.push_back("train.out_dir=" + nlohmann::json(o.out).dump());
  if (!o.device.empty()) overrides.push_back("train.device=" + o.device);
  if (o.threads > 0) {
    overrides.push_back("train.threads=" + std::to_string(o.threads));
  } else if (const int cpus = slurm_cpus_per_task(); cpus > 0) {
    // Under Slurm the CPUs the job was given are the default, not the config's count.
    spdlog::info("train.threads={} from SLURM_CPUS_PER_TASK (--threads overrides it)", cpus);
    overrides.push_back("train.threads=" + std::to_string(cpus));
  }
  return overrides;
}

/// This command line again, without --nproc: what each local rank runs.
std::vector<std::string> rank_command(const TrainOptions& o) {
  std::vector<std::string> argv = {self_executable(), "train", o.config};
  for (const auto& s : o.overrides) argv.insert(argv.end(), {"--set", s});
  if (!o.out.empty()) argv.insert(argv.end(), {"--out", o.out});
  if (!o.device.empty()) argv.insert(argv.end(), {"--device", o.device});
  if (o.threads > 0) argv.insert(argv.end(), {"--threads", std::to_string(o.threads)});
  if (!o.resume.empty()) argv.push_back(o.resume == "auto" ? "--resume=auto" : "--resume");
  if (o.no_progress) argv.push_back("--no-progress");
  return argv;
}

/// Whether this run continues from a checkpoint: --resume, or --resume=auto
/// where the run directory holds one (said in the log either way).
bool resume_requested(const TrainOptions& o, const Config& cfg) {
  if (o.resume != "auto") return !o.resume.empty();
  const auto checkpoint = std::filesystem::path(cfg.train.out_dir) / run_files::kCheckpoint;
  const bool found = std::filesystem::exists(checkpoint);
  spdlog::info("--resume=auto: {}", found ? checkpoint.string() + " is there: continuing the run"
                                          : "no checkpoint in " + cfg.train.out_dir + ": starting the run");
  return found;
}

bool stopped_by_request(int code) { return code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGHUP; }

std::string describe_exit(int code) {
  if (code > 128) return "killed by signal " + std::to_string(code - 128) + " (exit " + std::to_string(code) + ")";
  return "exit " + std::to_string(code);
}

/// N local ranks against what the machine has, before any starts: more ranks
/// than GPUs, or CPU ranks whose models together cannot fit, are refused; more
/// threads than cores is said once, since the ranks then take turns.
void check_ranks_fit(const Config& cfg, const torch::Device& device, int nproc) {
  if (device.is_cuda()) {  // local rank r trains on GPU r, each its own model
    const int gpus = static_cast<int>(torch::cuda::device_count());
    if (nproc > gpus)
      throw ConfigError(
          fmt::format("--nproc {} with train.device={}: this machine has {} CUDA device(s), and each "
                      "rank takes one; start at most {} rank(s)",
                      nproc, name_of(cfg.train.device), gpus, gpus));
    check_model_fits(cfg.model, task_vocab_size(cfg.task), device);
    return;
  }
  check_model_fits(cfg.model, task_vocab_size(cfg.task), device, nproc);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = static_cast<int>(cfg.train.threads);
  if (nproc * threads > cores)
    spdlog::warn(
        "--nproc {} x train.threads {} = {} threads on {} cores: the ranks take turns, and training is "
        "slower than with {} rank(s)",
        nproc, threads, nproc * threads, cores, std::max(1, cores / threads));
}

/// `posenc train --nproc N`: N ranks on this machine with a rendezvous on a
/// free local port. A stop request is passed to every rank once (they stop at
/// the same step; rank 0 writes the checkpoint). A rank that fails brings the
/// others down: they see the failure at their next collective; any still
/// running after a grace period are killed. Returns the first failing
/// rank's exit status (0 when all succeed).
int launch_local_ranks(const TrainOptions& o) {
  if (read_launch_from_environment().distributed())
    throw ConfigError(
        "--nproc starts its own ranks, but this process is already one rank of a launch (RANK/WORLD_SIZE or an "
        "srun step are set): drop --nproc, or start posenc train --nproc outside torchrun and srun");
  // What every rank would refuse, refused once here.
  const Config cfg = load_config(o.config, train_overrides(o));
  check_batch_divides(cfg.train, o.nproc);
  const torch::Device device = resolve_device(cfg.train.device);
  check_ranks_fit(cfg, device, o.nproc);
  resolve_backend(cfg.train.backend, device);  // one this build lacks
  const int port = free_local_port();
  const std::vector<std::string> argv = rank_command(o);
  std::map<pid_t, int> rank_of;
  std::string pids;
  for (int r = 0; r < o.nproc; ++r) {
    std::string error;
    const pid_t pid = spawn_child(argv, local_rank_environment(r, o.nproc, port), "", &error);
    if (pid < 0) {
      for (const auto& [p, _] : rank_of) ::kill(p, SIGKILL);
      throw std::runtime_error(error);
    }
    rank_of[pid] = r;
    pids += (r ? ", " : "") + fmt::format("rank {} pid {}", r, pid);
  }
  spdlog::info("started {} ranks ({}; rendezvous 127.0.0.1:{}); rank 0 writes the run", o.nproc, pids, port);
  constexpr auto kGrace = std::chrono::seconds(15);
  using Clock = std::chrono::steady_clock;
  int first_failure = 0;
  bool passed_stop = false;
  // When to kill the ranks still running after one failed; max() while none has.
  Clock::time_point kill_at = Clock::time_point::max();
  while (!rank_of.empty()) {
    // Each stop request once to every rank, as the signal it came as (Ctrl-C
    // stays SIGINT: exit 130), since the ranks' process groups are their own.
    if (const int sig = interrupt_signal(); sig != 0 && !passed_stop) {
      for (const auto& [pid, _] : rank_of) ::kill(pid, sig);
      passed_stop = true;
    }
    if (Clock::now() > kill_at) {
      for (const auto& [pid, r] : rank_of) {
        spdlog::error("rank {} still running {} s after the failure: killing it", r, kGrace.count());
        ::kill(pid, SIGKILL);
      }
      kill_at = Clock::time_point::max();
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const auto it = rank_of.find(pid);
    if (it == rank_of.end()) continue;
    const int rank = it->second;
    rank_of.erase(it);
    const int code = exit_status(status);
    if (code == 0 || first_failure != 0) continue;
    first_failure = code;
    if (stopped_by_request(code)) continue;  // the others are stopping at the same step
    kill_at = Clock::now() + kGrace;
    if (!rank_of.empty())
      spdlog::error("rank {} ended ({}); the other ranks stop at their next collective", rank, describe_exit(code));
  }
  return first_failure;
}

}  // namespace

int run_train(const TrainOptions& o) {
  const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: finish the step, checkpoint, exit 130/143
  if (!o.device.empty()) resolve_device(o.device, "--device");  // a refusal names the flag the user typed
  if (o.nproc > 1) return launch_local_ranks(o);
  const Config cfg = load_config(o.config, train_overrides(o));
  posenc::TrainRequest options;
  options.launch = read_launch_from_environment();
  if (options.launch.rank > 0) {  // rank 0 speaks for the run; the others only warn
    spdlog::set_pattern("%H:%M:%S %^%l%$ rank " + std::to_string(options.launch.rank) + ": %v");
    spdlog::set_level(spdlog::level::warn);
  }
  log_environment();
  options.resume = resume_requested(o, cfg);
  options.progress = !o.no_progress && ::isatty(STDERR_FILENO) && options.launch.rank == 0;
  train(cfg, options);
  return 0;
}

}  // namespace posenc::cli
