// Names shared by `posenc train` and the tools that read its run directories
// (compare, summaries). No torch here.
#pragma once

namespace posenc {

/// Written instead of results.json when the loss or the gradient norm went NaN/inf.
inline constexpr const char* kDivergedFile = "diverged.json";

/// `posenc train`'s exit status for such a run (1: other failures, 2: bad
/// input, 128 + N: stopped by signal N after checkpointing).
inline constexpr int kDivergedExitCode = 3;

}  // namespace posenc
