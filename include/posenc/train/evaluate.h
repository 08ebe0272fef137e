// A trained model's score per evaluation length, on the fixed evaluation sets
// of the config, by the task's metric (tasks/registry.h):
//   accuracy     classification, with a 95% Wilson interval and a breakdown by
//                negative kind (ordering);
//   exact_match  greedy decoding of the whole answer (sequence tasks), with
//                the per-token accuracy of the decoded answers;
//   perplexity   exp of the mean next-token NLL over held-out text (charlm).
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/task.h"
#include "posenc/util/bleu.h"
#include "posenc/util/stats.h"

namespace posenc {

struct Tally {
  int64_t n = 0, correct = 0;
  int64_t non_finite = 0;  ///< examples whose outputs held NaN or inf: their score measures nothing
  double accuracy() const { return n ? static_cast<double>(correct) / n : 0.0; }
};

/// A classifier's false alarms on the positive class (ordering: sorted
/// sequences), position by position: the head applied to each position's
/// output alone (EncoderImpl::classify_positions). Pooling over L positions
/// turns a per-position false-alarm rate p into up to 1 - (1 - p)^L per sequence.
struct FalseAlarms {
  int64_t positions = 0, alarms = 0;   ///< positions of positive examples; those whose own verdict is negative
  int64_t sequences = 0, alarmed = 0;  ///< positive examples; those with at least one alarm
  double position_rate() const { return positions ? static_cast<double>(alarms) / positions : 0.0; }
  double sequence_rate() const { return sequences ? static_cast<double>(alarmed) / sequences : 0.0; }
};

struct LengthResult {
  int64_t length = 0;
  TaskMetric metric = TaskMetric::Accuracy;
  /// Examples: classified right (accuracy), or decoded exactly (exact_match);
  /// for perplexity, next tokens predicted right (teacher-forced).
  Tally total;
  Interval ci95;       ///< of total
  Tally tokens;        ///< decoder: answer tokens right (greedy for exact_match, teacher-forced for perplexity)
  double nll_sum = 0;  ///< perplexity: summed negative log-likelihood (nats) of tokens.n predictions
  double perplexity() const { return tokens.n ? std::exp(nll_sum / static_cast<double>(tokens.n)) : 0.0; }
  std::map<std::string, Tally> by_kind;  ///< "sorted" and each negative kind
  bool has_false_alarms = false;         ///< an encoder pooling every position (not cls)
  FalseAlarms false_alarms;
  bool has_bleu = false;    ///< scored by BLEU too (TaskInfo::bleu)
  BleuCounts bleu;          ///< of the greedily decoded answers against the references
  bool has_oracle = false;  ///< eval.oracle_length: also decoded with the reference's length given
  Tally oracle;             ///< ... answers right before the reference's end token, with the end held back
  /// exact_match: the wrong answers by the index (from 0) of their first
  /// wrong answer token, where greedy decoding first left the reference
  /// (after it, each token is conditioned on a wrong prefix).
  std::map<int64_t, int64_t> first_wrong;
  /// The first eval.wrong_answers examples scored wrong, in the set's order, as
  /// the task writes tokens (Task::decode_text): a decoder's
  /// {example, prompt, reference, answer, first_wrong_token}; a classifier's
  /// {example, input, kind, label, predicted}. Empty when none are kept.
  nlohmann::json wrong_answers = nlohmann::json::array();
  int64_t non_finite = 0;            ///< examples with NaN or inf outputs (a warning is logged)
  bool beyond_training = false;      ///< longer than task.max_length
  bool untrained_positions = false;  ///< uses rows of a position table that training never reached
};

/// What evaluation and validation read of a run's config, and nothing more:
/// the fixed sets (eval.*), the task's training lengths and the validation size.
struct EvaluationSpec {
  EvalConfig sets;                         ///< lengths, samples per length, seed, max batch tokens
  int64_t min_length = 0, max_length = 0;  ///< task.min_length, task.max_length (training lengths)
  int64_t val_samples = 0;                 ///< train.val_samples
  /// Where the task defines position ids: one past the largest id training
  /// reaches (its offsets included; TaskInfo::positions_end), else 0.
  int64_t training_positions_end = 0;
};
EvaluationSpec evaluation_spec(const Config& cfg);

/// Largest (B, H, L, L) score tensor an evaluation batch may need: 2^26 floats
/// (256 MiB), so that long lengths (4096 with the default model) fit in memory.
constexpr int64_t kMaxScoreElements = int64_t{1} << 26;

/// Examples per evaluation batch for examples of `tokens` tokens: at most
/// max_batch_tokens tokens and at most kMaxScoreElements attention scores, at least 1.
int64_t evaluation_batch_size(const Transformer& model, int64_t tokens, int64_t max_batch_tokens);

/// Tallies predictions on one set, in chunks of evaluation_batch_size().
/// Runs under InferenceMode with the model in eval mode (restored afterwards).
/// With `interruptible`, a SIGINT/SIGTERM request (util/interrupt.h) stops it
/// between chunks by throwing Interrupted.
/// With `alarms` (an encoder that pools every position), also counts the
/// per-position false alarms on the examples of label 1.
/// With `wrong`, keeps the first `keep_wrong` examples classified wrong: (row, predicted class).
std::map<int, Tally> score_set(Transformer& model, const TaskBatch& set, torch::Device device, int64_t max_batch_tokens,
                               bool interruptible = false, FalseAlarms* alarms = nullptr,
                               std::vector<std::pair<int64_t, int64_t>>* wrong = nullptr, int64_t keep_wrong = 0);

/// A wrong answer of greedy decoding, as score_decoding keeps it.
struct WrongDecoding {
  int64_t row = 0;              ///< its row in the set
  std::vector<int64_t> answer;  ///< the decoded answer's tokens (as many as the reference's)
  int64_t first_wrong = 0;      ///< index of its first wrong token
  /// The model's likeliest tokens at the first wrong token (token,
  /// probability), likeliest first: the first is what it answered there.
  std::vector<std::pair<int64_t, double>> choices;
  double right_probability = 0;  ///< the reference token's probability there
};

/// How many of the model's likeliest tokens a kept wrong answer records.
inline constexpr int64_t kWrongAnswerChoices = 5;

/// What score_decoding counts besides exact matches and right tokens; what is
/// left null is not counted.
struct DecodingDetails {
  /// Each decoded answer and its reference, both cut before the token `eos`.
  BleuCounts* bleu = nullptr;
  /// The task's end token (Task::end_token; 0: answers of one length).
  int64_t eos = 0;
  /// With an `eos`: the set decoded again with `eos` held back until each
  /// reference's own end, counting the answers whose tokens before that end
  /// are all right (exact match when the model is given the length).
  Tally* oracle = nullptr;
  /// Each wrong answer counted under the index of its first wrong token.
  std::map<int64_t, int64_t>* first_wrong = nullptr;
  /// The first `keep_wrong` wrong answers, in the set's order, each with the
  /// model's kWrongAnswerChoices likeliest tokens at its first wrong token.
  std::vector<WrongDecoding>* wrong = nullptr;
  int64_t keep_wrong = 0;
};

/// Decoder: exact matches (per example) and right tokens of greedily decoded
/// answers of `set` (the prompt is tokens[:, :answer_start]), and the `details` asked for.
std::pair<Tally, Tally> score_decoding(Transformer& model, const TaskBatch& set, torch::Device device,
                                       int64_t max_batch_tokens, bool interruptible = false,
                                       const DecodingDetails& details = {});
/// Decoder, teacher-forced: right next tokens of the answers and their summed
/// NLL (nats); `exact` (if given) counts examples with every answer token right.
Tally score_teacher_forced(Transformer& model, const TaskBatch& set, torch::Device device, int64_t max_batch_tokens,
                           double* nll_sum, Tally* exact = nullptr, bool interruptible = false);

/// Scores the config's evaluation lengths on its fixed sets (check_evaluation_fits
/// first; interruptible between batches).
std::vector<LengthResult> evaluate_lengths(Transformer& model, const Task& task, const EvaluationSpec& spec,
                                           const std::vector<int64_t>& lengths, torch::Device device);

/// In-distribution validation: fixed sets over task.min_length..max_length
/// (charlm: held-out windows of max_length). Classification accuracy; exact
/// match, teacher-forced, for sequence tasks (the same as greedy decoding's: an
/// answer decodes exactly iff every teacher-forced argmax is right); next-token
/// accuracy for language modelling. With `interruptible`, a stop request ends
/// it between batches by throwing Interrupted. With shards > 1, only the
/// examples of shard `shard` (a contiguous slice of each set) are scored: the
/// shards' tallies sum to the whole one (data parallel ranks split it so).
Tally validation_accuracy(Transformer& model, const Task& task, const EvaluationSpec& spec, torch::Device device,
                          bool interruptible = false, int shard = 0, int shards = 1);

/// Shard `shard` of `shards` of a batch: its rows [n * shard / shards,
/// n * (shard + 1) / shards) (tokens, labels, kinds); the batch itself for one shard.
TaskBatch shard_rows(const TaskBatch& batch, int shard, int shards);

nlohmann::json length_results_to_json(const std::vector<LengthResult>& results);
/// Corpus BLEU of the lengths scored by it: {"all", "within_training",
/// "beyond_training"} (null where no length is), or null for a task without BLEU.
nlohmann::json corpus_bleu_json(const std::vector<LengthResult>& results);
/// Human-readable table (one row per length) for the terminal.
std::string format_length_table(const std::vector<LengthResult>& results, const Task& task);
/// The kept wrong answers (eval.wrong_answers) for the terminal: per decoded
/// answer the reference's and the answer's words around the first wrong
/// token, which is in brackets; per misclassified example its kind and label.
std::string format_wrong_answers(const std::vector<LengthResult>& results);

/// Exact match for every pair (digits of a, digits of b) of a task with two
/// operands (eval.operand_grid): exact[i][j] scores a of digits[i] and b of
/// digits[j] digits, on eval.samples_per_length examples.
struct OperandGrid {
  std::vector<int64_t> digits;
  std::vector<std::vector<Tally>> exact;
};
OperandGrid evaluate_operand_grid(Transformer& model, const Task& task, const EvaluationSpec& spec,
                                  const std::vector<int64_t>& digits, torch::Device device);
/// {"digits": [...], "exact_match": rows of a, columns of b, "n": rows of counts}
nlohmann::json operand_grid_to_json(const OperandGrid& grid);
/// The grid as a terminal table: a's digits down, b's across.
std::string format_operand_grid(const OperandGrid& grid);

}  // namespace posenc
