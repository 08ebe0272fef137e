// Continuing token sequences with a decoder or an encoder_decoder: greedy (the
// sequence tasks' evaluation), sampled with a temperature and top-k (`posenc
// generate`), or by beam search (`posenc translate --beam`).
//
// A prompt is `x SEP`: a decoder continues it; an encoder_decoder encodes x
// once (with every decoder block's cross-attention keys and values) and
// decodes from SEP. With a KV cache (Transformer::supports_kv_cache) the
// prompt is one forward and each new token one more forward over a single
// position; schemes whose encoding depends on the sequence's length rerun the
// whole target per token.
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
  /// If hold_token > 0: row r may not pick hold_token before step hold_until[r]
  /// ((B) int64). With the end token and the reference's length, that is
  /// decoding with the length given (eval.oracle_length).
  int64_t hold_token = 0;
  torch::Tensor hold_until;
  /// (B, P + steps) int64 on the CPU: the task-defined position ids of the
  /// prompt and the answer (TaskBatch::positions), for a decoder whose task has them.
  torch::Tensor positions;
};

/// prompt (B, P) int64 on the model's device -> the next `steps` tokens (B, steps)
/// (fewer when an interruptible generation was asked to stop).
/// Runs under InferenceMode with the model in eval mode (restored afterwards).
torch::Tensor continue_tokens(Transformer& model, const torch::Tensor& prompt, int64_t steps,
                              const Sampling& sampling = {});

struct BeamOptions {
  int64_t beam = 4;
  /// GNMT's length penalty: a hypothesis of n tokens is ranked by its
  /// log-probability / ((5 + n) / 6)^length_penalty; 0 ranks by log-probability.
  double length_penalty = 0;
  /// The end-of-sequence token: a hypothesis that emits it is finished (0: none,
  /// every hypothesis runs the full `steps`).
  int64_t eos = 0;
};

struct Hypothesis {
  std::vector<int64_t> tokens;  ///< the continuation, with its end-of-sequence token if it emitted one
  double log_prob = 0;          ///< summed log-probability of those tokens
  double score = 0;             ///< log_prob under the length penalty (what the beam ranks by)
};

/// Beam search from one prompt (1, P): up to `beam` finished hypotheses, best
/// first. Beam 1 is greedy decoding. Runs under InferenceMode in eval mode.
/// Throws Interrupted at the next step once a stop is requested (interrupt.h).
std::vector<Hypothesis> beam_search(Transformer& model, const torch::Tensor& prompt, int64_t steps,
                                    const BeamOptions& options);

}  // namespace posenc
