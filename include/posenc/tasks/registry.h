// The one table of tasks: name -> the model kind it trains, its metric, the
// task.* keys it takes, its defaults, a description and a factory.
//
// It drives config parsing (task.type and the keys each task accepts),
// `posenc list`, the trainer and evaluator (which model head, which metric),
// comparison grids and the generic tests. A new task is one source file
// defining its class and a TaskInfo, one line in tasks/registry.cpp, its
// declaration, a test and a README row: docs/adding-a-task.md lists the five
// files. This header stays free of torch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "posenc/choices.h"
#include "posenc/options.h"

namespace posenc {

class Task;  // tasks/task.h

/// The task block of a config (config.h reads it). Each task takes type, min_length, max_length
/// and the options its registry entry declares (`posenc list`); any other key
/// is an error naming the task.
struct TaskConfig {
  std::string type = "ordering";
  /// Training lengths, in the task's unit (tokens; digits for addition; context for charlm).
  int64_t min_length = 4;
  int64_t max_length = 16;
  /// The task's own options, resolved against its registry entry (defaults filled in).
  Options options;
};

/// The metric a task is scored by, per evaluation length.
enum class TaskMetric {
  Accuracy,    ///< classification accuracy (chance 0.5 for ordering)
  ExactMatch,  ///< whole answer right under greedy decoding (plus per-token accuracy)
  Perplexity,  ///< exp of the mean next-token negative log-likelihood (lower is better)
};
const char* metric_name(TaskMetric m);  ///< "accuracy", "exact_match", "perplexity"
/// The key under which results.json holds a length's score (n, correct and ci95
/// count the same thing): "accuracy", "exact_match", and for perplexity, whose
/// own number is "perplexity", the next-token accuracy "token_accuracy".
const char* score_key(TaskMetric m);
/// score_key of a metric named as metric_name() names it; "accuracy" for a name it does not know.
std::string score_key(const std::string& metric);

/// One value of a task option (`task.carries=written`).
struct TaskSetting {
  std::string option;  ///< the task's option, without the "task." prefix
  nlohmann::json value;
  std::string shown() const;                  ///< "task.carries=written"
  bool holds(const Options& resolved) const;  ///< the resolved task options give `option` this value
};

/// A quantity of each token that `posenc probe --target` looks for in a
/// model's residual streams, besides the position every task has.
struct ProbeTargetSpec {
  std::string name;
  std::string description;  ///< what its value is, at which tokens it is defined
  /// The setting without which the task has no such quantity: probe_target_spec
  /// refuses the target for a config without it, naming it, so the task's own
  /// code may assume it. Unset: every config.
  std::optional<TaskSetting> only_where = {};
  std::string otherwise = {};  ///< with only_where: what to probe instead, said in the refusal
};
/// The probe targets every task has, whatever its tokens: each token's index
/// in what its stack reads, and how many tokens its side holds after it.
inline constexpr const char* kPositionTarget = "position";
inline constexpr const char* kRemainingTarget = "remaining";
inline const std::vector<ProbeTargetSpec>& generic_probe_targets() {
  static const std::vector<ProbeTargetSpec> targets = {
      {kPositionTarget,
       "each token's index in what its stack reads (0 for the first; in an encoder_decoder, each side's)"},
      {kRemainingTarget,
       "the tokens its side holds after it, padding and the end token not counted (in a decoder: still to read or "
       "write; 0 where the end comes next)"}};
  return targets;
}

struct TaskInfo {
  std::string name;
  std::string description;
  /// The model kinds it trains, the usual one first: an encoder (bidirectional
  /// classifier), a decoder (causal, next-token loss), an encoder_decoder
  /// (the prompt is the encoder's source, the answer the decoder's target).
  std::vector<ModelKind> model_kinds;
  TaskMetric metric = TaskMetric::Accuracy;
  /// exact_match tasks: also corpus BLEU of the decoded answers (translation).
  bool bleu = false;
  /// task.* options this task takes besides type, min_length and max_length:
  /// validated by options.h, listed by `posenc list`, settable with --set.
  std::vector<OptionSpec> options;
  /// Examples of one batch differ in length (padded with token 0; TaskBatch::padded).
  bool padded = false;
  /// What `length` means in task.min_length, task.max_length and eval.lengths.
  std::string length_unit;
  /// Data tokens 1..V: V = fixed_vocab_size, else the task's vocab_size option,
  /// else recorded_vocab_size, else the vocabulary of the task's data (tasks/task.h's
  /// Task::vocab_size(), which builds the task and reads its data).
  int64_t fixed_vocab_size = 0;
  /// V as the config records it (translation's task.vocabulary, written when
  /// training starts), read without the data; 0 where none is recorded.
  std::function<int64_t(const TaskConfig&)> recorded_vocab_size;
  int64_t default_min_length = 4, default_max_length = 16;
  std::vector<int64_t> default_eval_lengths;
  std::function<std::unique_ptr<Task>(const TaskConfig&)> make;
  /// Where the task defines a position id per token (TaskBatch::positions) for
  /// this config: one past the largest id of an example of `length`, training
  /// offsets included; 0 (or no function) where the model counts 0..L-1.
  std::function<int64_t(const TaskConfig&, int64_t length)> positions_end;
  /// An example is two operands whose lengths can differ (addition):
  /// Task::fixed_operand_set and eval.operand_grid apply.
  bool has_operands = false;
  /// What Task::probe_target computes for `posenc probe --target` (`position` aside).
  std::vector<ProbeTargetSpec> probe_targets;
};

/// The `vocab_size` option (default 64) of the tasks whose tokens are 1..V
/// (V = vocab_size, 0 = padding, V + 1 = CLS or SEP).
OptionSpec vocab_size_option();

/// The model's data tokens for this config (1..V), without building the task.
int64_t task_vocab_size(const TaskConfig& cfg);

/// The declaration of probe target `name` (a generic one or the task's) for
/// the task `cfg` configures. ConfigError starting "--target NAME: " if the
/// task has no such target (naming those it has), or if the config lacks the
/// setting the target is defined only where.
const ProbeTargetSpec& probe_target_spec(const TaskConfig& cfg, const std::string& name);

/// All registered tasks, in listing order.
const std::vector<TaskInfo>& task_registry();
/// Throws ConfigError listing the known names.
const TaskInfo& find_task(const std::string& name);
std::vector<std::string> task_names();

}  // namespace posenc
