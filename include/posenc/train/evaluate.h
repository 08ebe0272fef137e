// Accuracy of a trained classifier: per length, with a 95% Wilson interval and
// a breakdown by negative kind, on the fixed evaluation sets of the config.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/ordering.h"

namespace posenc {

struct Interval {
  double lo = 0, hi = 0;
};
/// Wilson score interval for `correct` successes in `n` trials (z = 1.96 for 95%).
Interval wilson_interval(int64_t correct, int64_t n, double z = 1.96);

struct Tally {
  int64_t n = 0, correct = 0;
  double accuracy() const { return n ? static_cast<double>(correct) / n : 0.0; }
};

struct LengthResult {
  int64_t length = 0;
  Tally total;
  Interval ci95;
  std::map<std::string, Tally> by_kind;  ///< "sorted" and each negative kind
  bool beyond_training = false;          ///< longer than task.max_length
  bool untrained_positions = false;      ///< uses rows of a position table that training never reached
};

/// Largest (B, H, L, L) score tensor an evaluation batch may need: 2^26 floats
/// (256 MiB), so that long lengths (4096 with the default model) fit in memory.
constexpr int64_t kMaxScoreElements = int64_t{1} << 26;

/// Sequences per evaluation batch at `length`: at most max_batch_tokens tokens
/// and at most kMaxScoreElements attention scores, at least 1.
int64_t evaluation_batch_size(const EncoderClassifier& model, int64_t length, int64_t max_batch_tokens);

/// Tallies predictions on one set, in chunks of evaluation_batch_size().
/// Runs under InferenceMode with the model in eval mode (restored afterwards).
/// With `interruptible`, a SIGINT/SIGTERM request (util/interrupt.h) stops it
/// between chunks by throwing Interrupted.
std::map<int, Tally> score_set(EncoderClassifier& model, const Batch& set, torch::Device device,
                               int64_t max_batch_tokens, bool interruptible = false);

/// Bytes that evaluating `samples` sequences of `length` needs at its peak, by
/// an upper estimate: the token set, and per batch four (B, H, L, L) float
/// tensors (scores, bias, probabilities, a temporary) plus activations.
double evaluation_memory_bytes(const EncoderClassifier& model, int64_t length, int64_t samples,
                               int64_t max_batch_tokens);

/// Throws ConfigError before anything runs if a length cannot fit: longer than
/// the model's position table, or (on the CPU) more memory than MemAvailable.
void check_evaluation_fits(const EncoderClassifier& model, const Config& cfg, const std::vector<int64_t>& lengths,
                           torch::Device device);

/// Scores the config's evaluation lengths on its fixed sets (check_evaluation_fits
/// first; interruptible between batches).
std::vector<LengthResult> evaluate_lengths(EncoderClassifier& model, const Config& cfg,
                                           const std::vector<int64_t>& lengths, torch::Device device);

/// In-distribution validation accuracy: fixed sets over task.min_length..max_length.
Tally validation_accuracy(EncoderClassifier& model, const Config& cfg, torch::Device device);

nlohmann::json length_results_to_json(const std::vector<LengthResult>& results);
/// Human-readable table (one row per length) for the terminal.
std::string format_length_table(const std::vector<LengthResult>& results);

}  // namespace posenc
