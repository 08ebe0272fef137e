// What a trained model does, as JSON for the plotting scripts: its positional
// scheme after training (`posenc inspect --checkpoint`) and its attention on
// one example (`posenc attention`).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace posenc {

class Transformer;
class Task;
struct PositionalConfig;

/// The kind index (TaskBatch::kinds) that `--kind name` asks for: kSortedKind
/// for "sorted", else an index into task.kind_names(). ConfigError where the
/// model is not the classifier or its task's examples have no kinds
/// (`task_type` names the task), or for a kind the task does not have.
int requested_kind(const Transformer& model, const Task& task, const std::string& task_type, const std::string& kind);

/// Which of a model's schemes to describe: model.positional.type, .input (before
/// block 1) or .with (beside type in the same attention).
enum class SchemeSlot { Type, Input, With };

/// The config key of a slot ("model.positional.type", ...).
const char* slot_key(SchemeSlot slot);

/// The scheme a model's config puts in `slot` ("none" for an empty slot).
const std::string& slot_scheme(const PositionalConfig& p, SchemeSlot slot);

/// The trained model's scheme in `slot` (first layer it acts at; with `block`
/// > 0 the instance that block runs, for schemes not shared across layers),
/// described like `posenc inspect` does, over `length` positions (ids
/// 0..length-1), with "trained_ids_end" where it reads the ids the task gives
/// each token: one past the largest id training can give
/// (TaskInfo::positions_end at task.max_length, a bound).
nlohmann::json inspect_checkpoint(const std::string& checkpoint, int64_t length, SchemeSlot slot = SchemeSlot::Type,
                                  int64_t block = 0);

struct AttentionRequest {
  int64_t length = 16;          ///< tokens in the example (plus CLS with cls pooling)
  std::string kind = "sorted";  ///< "sorted" or a negative kind (shuffle, adjacent_swap, ...)
  bool kind_given = false;      ///< --kind was given: refused where the task's examples have no kinds
  int64_t index = 0;            ///< which example of that kind in the fixed evaluation set
};

/// Attention probabilities of every block on one example from the
/// checkpoint's fixed evaluation set at `length` (eval.seed):
/// {"tokens", "label", "kind", "p_sorted", "prediction", "cls", "layers": [block][head][query][key]}.
nlohmann::json attention_example(const std::string& checkpoint, const AttentionRequest& request);

}  // namespace posenc
