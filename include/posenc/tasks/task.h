// The interface every task implements (its registry entry is in tasks/registry.h).
//
// A task turns (seed, step) into a training batch and (seed, length) into a
// fixed evaluation set, both pure functions, so runs resume bit-for-bit and
// every scheme is scored on the same examples. Token 0 is padding (never
// produced), data tokens are 1..vocab_size(), and vocab_size() + 1 is the one
// special token: CLS for the encoder classifier, SEP between input and answer
// for the decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/tasks/registry.h"
#include "posenc/util/seeds.h"

namespace posenc {

/// Examples of one length (no padding anywhere).
struct TaskBatch {
  torch::Tensor tokens;  ///< (B, T) int64
  /// Encoder classification: (B) int64 class labels.
  torch::Tensor labels;
  /// Decoder tasks: tokens[:, answer_start:] are the answer, scored and trained
  /// on; everything before it is the prompt (`x SEP`). 1 for language modelling.
  int64_t answer_start = 0;
  /// Per example: a kind index into Task::kind_names() (-1 = the positive
  /// class of ordering); empty for tasks without kinds.
  std::vector<int> kinds;
  /// Examples of different lengths, padded with token 0: each source (before
  /// SEP) at its end, each answer after its end-of-sequence token. Only for
  /// tasks an encoder_decoder reads (TaskInfo::padded).
  bool padded = false;
  /// (B, T) int64: the position id of every token, where the task defines them
  /// (TaskInfo::positions_end); undefined: the model counts 0..T-1.
  torch::Tensor positions;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const TaskInfo& info() const = 0;
  /// Data tokens are 1..vocab_size(); the model's table has vocab_size() + 2 rows.
  virtual int64_t vocab_size() const = 0;
  /// Tokens of one example whose task length is `length` (the model reads one
  /// fewer as a decoder: the last answer token is predicted, never fed); where
  /// the data decides an example's width (widest_data), of the widest one, and
  /// a batch is as wide as its own rows need, at most this.
  virtual int64_t sequence_length(int64_t length) const { return length; }
  /// A training batch for `step`: one length drawn from [min_length, max_length].
  virtual TaskBatch train_batch(int64_t step, int64_t batch_size, int64_t seed) const = 0;
  /// A fixed set of (up to) n examples of one length.
  virtual TaskBatch fixed_set(int64_t length, int64_t n, int64_t seed) const = 0;
  /// A task of two operands (TaskInfo::has_operands): n examples whose operands
  /// have `a_digits` and `b_digits` digits; fixed_set(n) where they are equal.
  virtual TaskBatch fixed_operand_set(int64_t /*a_digits*/, int64_t /*b_digits*/, int64_t /*n*/,
                                      int64_t /*seed*/) const {
    throw std::logic_error("task " + info().name + " has no operands");
  }
  /// A task of two operands: the tokens of an example whose operands have
  /// `a_digits` and `b_digits` digits (the operand grid's cells are checked
  /// against the model with it before anything runs).
  virtual int64_t operand_sequence_length(int64_t a_digits, int64_t b_digits) const {
    return sequence_length(a_digits > b_digits ? a_digits : b_digits);
  }
  /// Throws ConfigError if an evaluation set of this length cannot be made
  /// (a held-out text shorter than one window); called before training starts.
  virtual void check_eval_length(int64_t /*length*/) const {}
  /// Throws ConfigError before training if task.min_length..max_length leave
  /// nothing to train or validate on; by default, check_eval_length(max_length).
  virtual void check_training_lengths(int64_t /*min_length*/, int64_t max_length) const {
    check_eval_length(max_length);
  }
  /// A task read from a file: the task options that identify the file's
  /// content ({"bytes", "checksum"}), which training records in the run's
  /// config; an empty object for tasks that generate their data.
  virtual nlohmann::json data_identity() const { return nlohmann::json::object(); }
  /// The token that ends an answer of varying length (0: answers have a fixed length).
  virtual int64_t end_token() const { return 0; }
  /// Where the task's data, not the length, makes an example wide (translation:
  /// "the longest source, N words at FILE line L"), for memory errors to name
  /// the cause; empty for tasks whose width follows from the length alone.
  virtual std::string widest_data() const { return {}; }
  /// The longest length training saw, for marking evaluation lengths beyond it:
  /// task.max_length (`configured`), unless the task's data decides it (SCAN's split).
  virtual int64_t longest_training_length(int64_t configured) const { return configured; }
  /// The values of probe target `name` (one of info().probe_targets) at each
  /// token of fixed_set(length, n, seed): (n, T) float64 aligned with its
  /// tokens, NaN at the tokens where the quantity is not defined.
  /// std::logic_error for a name the task does not declare.
  torch::Tensor probe_target(const std::string& name, int64_t length, int64_t n, int64_t seed) const;
  /// Names of TaskBatch::kinds (ordering's negative kinds); empty if none.
  virtual std::vector<std::string> kind_names() const { return {}; }
  /// Text of a prompt as tokens, and tokens as text (language modelling, `posenc generate`).
  virtual std::vector<int64_t> encode_text(const std::string& text) const;
  virtual std::string decode_text(const std::vector<int64_t>& tokens) const;

 protected:
  /// probe_target's values, for a `name` that info().probe_targets declares:
  /// a task with probe targets overrides this, and needs no list of its own.
  virtual torch::Tensor declared_probe_target(const std::string& name, int64_t /*length*/, int64_t /*n*/,
                                              int64_t /*seed*/) const {
    throw std::logic_error("task " + info().name + " declares probe target " + name + " but does not compute it");
  }
};

/// A task's data file (task.path) read whole: ConfigError starting "task.path: "
/// if it cannot be read, is larger than `max_bytes`, or is not UTF-8 text.
std::string read_task_file(const std::string& path, std::uintmax_t max_bytes);

/// Builds the task named by cfg.type (ConfigError for a bad file, option or name).
std::unique_ptr<Task> make_task(const TaskConfig& cfg);

}  // namespace posenc
