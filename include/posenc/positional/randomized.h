// Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional
// Encodings Boost Length Generalization of Transformers"): during training a
// batch of length L gets, instead of 0..L-1, a sorted random subset of
// [0, max_position), so that positions far beyond the training lengths are
// seen in training. Evaluation keeps 0..L-1. It works through the explicit
// position ids, for every scheme, without scheme code of its own.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace posenc {

/// `length` distinct ids from [0, max_position), sorted, int64 (CPU): a pure
/// function of (seed, step), drawn apart from the batch's tokens.
torch::Tensor randomized_positions(int64_t length, int64_t max_position, int64_t seed, int64_t step);

}  // namespace posenc
