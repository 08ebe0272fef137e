// A comparison grid: schemes x attention variants x pooling x seeds, read from
// one JSON file (configs/ordering_compare.json) and expanded into one resolved
// training config per run.
//
// The file, e.g.
//   {"base": "ordering.json", "set": {"train.steps": 2000}, "schemes": ["rope", "alibi"],
//    "qkv": ["projected", "embedded"], "seeds": [0], "full": {"seeds": [0, 1, 2]}}
// Its keys are declared once, in grid_file_keys() (`posenc list` prints them).
// Every run lives in OUT/runs/<id>, id = <scheme>-<qkv>-<pooling>-s<seed>, with
// <task>- in front when the file has a "tasks" axis.
// A combination the model cannot build (IncompatibleConfig) is kept in the plan
// as skipped, with the reason; any other error names the file and the entry.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "posenc/config.h"
#include "posenc/config_overlay.h"

namespace posenc {

struct PlannedRun {
  std::string id;       ///< rope-projected-max-s0: the run directory's name
  std::string variant;  ///< rope-projected-max: runs that differ only by seed
  std::string task;     ///< the "tasks" entry's name; empty without a tasks axis
  std::string scheme;   ///< the grid entry's name (rope, alibi-directional, ...)
  std::string qkv, pooling;
  int64_t seed = 0;
  Config config;        ///< resolved; train.out_dir = OUT/runs/<id>
  std::string skipped;  ///< non-empty: not run, and why
};

struct ComparePlan {
  std::string source;   ///< the comparison file
  std::string out_dir;  ///< OUT
  std::string description;
  bool full = false;
  std::vector<std::string> tasks;    ///< the "tasks" axis (empty: the base's task only)
  std::vector<std::string> schemes;  ///< grid order
  std::vector<PlannedRun> runs;      ///< task-major, then scheme, qkv, pooling, seed
  json slurm = json::object();       ///< the file's "slurm" block, as written (experiments/slurm.h reads it)

  std::string run_dir(const PlannedRun& r) const;
  std::string log_path(const PlannedRun& r) const;     ///< OUT/logs/<id>.log
  std::string config_path(const PlannedRun& r) const;  ///< OUT/configs/<id>.json (what the child trains)
};

/// The keys of a comparison file: what each holds, whether it is required, and
/// which the "full" block (read under --full in place of the top-level ones) may hold.
const std::vector<FileKey>& grid_file_keys();

/// Reads and expands a comparison file. `threads` goes into every run's config.
ComparePlan plan_comparison(const std::string& path, const std::string& out_dir, bool full, int64_t threads);

enum class RunState {
  Finished,   ///< results.json holds this config: skipped on rerun
  Resumable,  ///< checkpoint.pt holds this config: continued with --resume
  Diverged,   ///< diverged.json holds this config: training is deterministic, so not retried
  Fresh,      ///< nothing (or only logs of a run killed before its first checkpoint)
};

/// Where a planned run stands on disk. Throws ConfigError if its directory
/// holds a run made from a different config (never touches it).
RunState run_state(const ComparePlan& plan, const PlannedRun& run);

}  // namespace posenc
