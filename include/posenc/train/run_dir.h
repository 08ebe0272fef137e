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

/// Written instead of results.json when the loss or the gradient norm went NaN/inf.
inline constexpr const char* kDivergedFile = "diverged.json";

/// `posenc train`'s exit status for such a run (1: other failures, 2: bad
/// input, 128 + N: stopped by signal N after checkpointing).
inline constexpr int kDivergedExitCode = 3;

/// JSON pointers of the config parts that --resume accepts changed.
const std::vector<std::string>& resumable_changes();

/// What a fresh (not --resume) run may start in: a new or empty directory, or
/// one holding only an unfinished start of the same run (config.json, no
/// checkpoint). Anything else is a ConfigError naming what is there.
void check_fresh_directory(const std::filesystem::path& dir, const Config& cfg);

/// Keeps the metrics lines of steps <= step (what a resumed run will not rewrite).
void truncate_metrics(const std::filesystem::path& file, int64_t step);

}  // namespace posenc
