// A training run's directory: the names shared by `posenc train` and the
// tools that read run directories (compare, summaries), and the checks train
// makes before it writes there. No torch here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "posenc/config.h"

namespace posenc {

/// The files of a run directory (and of a comparison's output root), named once.
namespace run_files {
inline constexpr const char* kConfig = "config.json";             ///< the resolved config
inline constexpr const char* kMetrics = "metrics.jsonl";          ///< one line per log interval and validation
inline constexpr const char* kCheckpoint = "checkpoint.pt";       ///< model, optimizer, step, RNG, running sums
inline constexpr const char* kResults = "results.json";           ///< written when training and evaluation finish
inline constexpr const char* kAverage = "average.pt";             ///< the mean weights of train.average_from
inline constexpr const char* kDiverged = "diverged.json";         ///< instead of results.json after NaN/inf
inline constexpr const char* kTrainLock = "train.lock";           ///< held while a `posenc train` works there
inline constexpr const char* kCompareLock = "compare.lock";       ///< held while a `posenc compare` works there
inline constexpr const char* kEvalResults = "results_eval.json";  ///< `posenc eval`'s default output
/// Files whose presence says a directory is a train run's (another command's --out refuses it).
inline std::vector<std::string> train_run_files() { return {kCheckpoint, kConfig, kTrainLock, kResults, kAverage}; }
}  // namespace run_files

/// JSON pointers of the config parts that --resume accepts changed: the keys
/// declared RunPart::Resumable or RunPart::Where (options.h).
const std::vector<std::string>& resumable_changes();

/// JSON pointers of the config parts with which a finished run is still the
/// run asked for: the keys declared RunPart::Where (where or how it ran).
const std::vector<std::string>& same_run_changes();

/// The same, for messages: "train.steps, train.threads, ... and eval.*".
std::string resumable_changes_text();

/// What a fresh (not --resume) run may start in: a new or empty directory, or
/// one holding only an unfinished start of the same run (config.json, no
/// checkpoint). Anything else is a ConfigError naming what is there.
void check_fresh_directory(const std::filesystem::path& dir, const Config& cfg);

/// Keeps the metrics lines of steps <= step (what a resumed run will not rewrite).
void truncate_metrics(const std::filesystem::path& file, int64_t step);

}  // namespace posenc
