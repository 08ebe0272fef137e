// Continuing token sequences with a decoder: greedy (the sequence tasks'
// evaluation) or sampled with a temperature and top-k (`posenc generate`).
//
// With a KV cache (Transformer::supports_kv_cache) the prompt is one forward
// and each new token one more forward over a single position; schemes whose
// encoding depends on the sequence's length rerun the whole sequence per token.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "posenc/model/transformer.h"

namespace posenc {

struct Sampling {
  double temperature = 0;                   ///< 0: greedy (argmax)
  int64_t top_k = 0;                        ///< > 0: sample among the k most likely tokens only
  int64_t first_token = 0, last_token = 0;  ///< sampling draws ids in [first, last] only (both 0: any)
  uint64_t seed = 0;
  /// If given: set to (B) bool, the rows whose logits were NaN or inf at some step.
  torch::Tensor* non_finite_rows = nullptr;
  /// Stop early, between tokens, when a stop was requested (util/interrupt.h):
  /// the tokens so far are returned.
  bool interruptible = false;
};

/// prompt (B, P) int64 on the model's device -> the next `steps` tokens (B, steps)
/// (fewer when an interruptible generation was asked to stop).
/// Runs under InferenceMode with the model in eval mode (restored afterwards).
torch::Tensor continue_tokens(Transformer& model, const torch::Tensor& prompt, int64_t steps,
                              const Sampling& sampling = {});

}  // namespace posenc
