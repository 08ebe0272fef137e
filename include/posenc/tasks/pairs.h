// Source-target pairs as an encoder_decoder's batch rows (tasks/task.h's
// layout): `source SEP target EOS`, each source padded with 0 to a fixed width
// so that the answer starts at one column for every row, each answer padded
// with 0 after its EOS to the batch's longest. SCAN and translation build
// their batches with it.
#pragma once

#include <cstdint>
#include <vector>

#include "posenc/tasks/task.h"

namespace posenc {

struct TokenPair {
  std::vector<int64_t> source, target;  ///< data tokens, no SEP or EOS
};

/// An evaluation set's examples: `pool` itself if it holds at most n, else a
/// fixed random n of them (a pure function of seed and length), in pool order.
std::vector<size_t> fixed_sample(std::vector<size_t> pool, int64_t n, int64_t seed, int64_t length);

/// Rows `chosen` of `pairs`: (n, S + 1 + A + 1) tokens, S the longest source of
/// these rows and at least `min_source_width`, A the longest target and at
/// least `min_answer`; answer_start = S + 1, padded = true. SEP is `eos` + 1.
/// A batch is as wide as its own rows need: one long line in a file widens only
/// the batches that hold it.
TaskBatch pair_rows(const std::vector<TokenPair>& pairs, const std::vector<size_t>& chosen, int64_t min_source_width,
                    int64_t eos, int64_t min_answer = 0);

}  // namespace posenc
