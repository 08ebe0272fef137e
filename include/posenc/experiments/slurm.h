// Running a comparison grid as Slurm job arrays: the cluster settings (the
// grid file's "slurm" block, then flags), the array scripts, their submission
// with sbatch and the jobs' state from squeue. Slurm schedules; each array
// task runs `posenc compare GRID --run ID`, which decides when it starts
// whether its run is new, to resume, or done. No torch here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "posenc/options.h"

namespace posenc {

struct SlurmSettings {
  std::string partition;      ///< --partition (empty: the cluster's default)
  std::string time;           ///< --time limit per task, e.g. "2:00:00"
  std::string account;        ///< --account
  int64_t gpus_per_task = 0;  ///< --gpus-per-task (0: none asked for); per rank
  /// Ranks per run: each run trains data parallel on this many Slurm tasks,
  /// started with srun (each rank gets its SLURM_PROCID); 1: one process.
  int64_t ntasks_per_run = 1;
  std::vector<std::string> sbatch;  ///< more #SBATCH options, as written after "#SBATCH " ("--qos=low")
};

/// The grid file's "slurm" block, declared: each key's type, bounds and doc.
/// The block and the flags of the same names (--partition, --gpus-per-task,
/// --sbatch, ...) are both checked against it; `posenc list` shows it.
const std::vector<OptionSpec>& slurm_block_keys();

/// The declaration of the "slurm" block's key `name`; std::logic_error if none.
const OptionSpec& slurm_block_key(const std::string& name);

/// `posenc compare --slurm`'s flags that stand for the block's keys and win
/// over them; empty or -1: not given.
struct SlurmFlags {
  std::string partition, time, account;
  int64_t gpus_per_task = -1;
  int64_t ntasks_per_run = -1;
  std::vector<std::string> sbatch;  ///< appended to the block's
};

/// Sets the declared setting `key` from `value` (for "sbatch", an array of
/// options or one option, appended), checked against its declaration and for what an
/// #SBATCH line takes: one line, no control characters, a time limit longer
/// than the grace time, no option that posenc writes itself. ConfigErrors
/// start with `where` (the block's key or the flag).
void set_slurm_setting(SlurmSettings& settings, const std::string& key, const nlohmann::json& value,
                       const std::string& where);

/// The grid file's "slurm" block: {"partition", "time", "account",
/// "gpus_per_task", "ntasks_per_run", "sbatch": ["--qos=low", ...]}. An unknown
/// key or a value that set_slurm_setting refuses is a ConfigError naming `where`.
SlurmSettings read_slurm_settings(const nlohmann::json& block, const std::string& where);

/// How long before its time limit a task is signalled to checkpoint.
constexpr int kSlurmGraceSeconds = 120;

/// One job array: task i trains run_ids[i].
struct ArraySpec {
  std::string job_name;
  std::vector<std::string> run_ids;
  int throttle = 0;  ///< at most this many tasks at once ("%N"); 0: no limit
  int64_t cpus_per_task = 1;
  std::string log_dir;                    ///< absolute; Slurm's own log and one log per run
  std::string workdir;                    ///< absolute; where each task starts
  std::vector<std::string> task_command;  ///< `posenc compare GRID ... --run`; the run id is appended
  int grace_s = kSlurmGraceSeconds;       ///< signalled this long before the time limit: the run checkpoints
  /// Starts once this job (the grid's previous array) has ended: a grid split
  /// into several arrays keeps `throttle` tasks at once in all. Empty: no wait.
  std::string after_job;
};

/// A Slurm time limit ("minutes", "minutes:seconds", "hours:minutes:seconds",
/// "days-hours", "days-hours:minutes", "days-hours:minutes:seconds") in
/// seconds; -1 for "UNLIMITED"/"INFINITE" or a form left for sbatch to judge.
int64_t slurm_time_seconds(const std::string& time);

/// Throws ConfigError naming `where` if `time` leaves no time to train before
/// the grace signal (at or below kSlurmGraceSeconds).
void check_time_beyond_grace(const std::string& time, const std::string& where);

/// The sbatch script of one job array. A task stopped by the SIGTERM that
/// Slurm sends before the time limit (or on preemption) has checkpointed, and
/// puts itself back in the queue (scontrol requeue) to resume.
std::string array_script(const ArraySpec& array, const SlurmSettings& settings);

/// `ids` in arrays of at most `max_array_size` tasks (array indices run from 0).
std::vector<std::vector<std::string>> split_into_arrays(const std::vector<std::string>& ids, int64_t max_array_size);

/// The cluster's MaxArraySize - 1 tasks fit in one array (indices 0..Max-1 are
/// allowed); from `scontrol show config`, or Slurm's default 1001 when unknown.
int64_t cluster_max_array_size();

/// Whether `program` is an executable on PATH.
bool on_path(const std::string& program);

/// Submits `script` with sbatch and returns the job id; ConfigError with
/// sbatch's own message when it refuses.
std::string submit_with_sbatch(const std::string& script);

/// What squeue says about the tasks of `job_ids`: "JOBID_TASK" -> state
/// (PENDING, RUNNING, ...). Tasks Slurm no longer lists have ended. `known` is
/// false when squeue is not there or fails.
struct QueueState {
  bool known = false;
  std::map<std::string, std::string> tasks;
};
QueueState queue_state(const std::vector<std::string>& job_ids);

/// The array tasks in the queue whose batch script is one of `scripts`
/// (absolute paths): "JOBID_TASK" -> {script, state}. This finds an array that
/// was submitted by hand, whose job id posenc never saw. Empty when squeue is
/// not there or fails.
struct ScriptTask {
  std::string script, state;
};
std::map<std::string, ScriptTask> queue_by_script(const std::vector<std::string>& scripts);

}  // namespace posenc
