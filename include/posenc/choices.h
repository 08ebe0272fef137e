// The config values that are one of a few words (model.kind, model.pooling,
// train.precision, ...), held as enums so that a misspelt choice does not
// compile. Each enum's names and docs sit in one table (choices.cpp), which
// parsing, printing, `posenc list` and docs/configs.md all read. No torch here.
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace posenc {

/// model.kind: which model a config builds.
enum class ModelKind { Encoder, Decoder, EncoderDecoder };
/// model.pooling: how an encoder's classifier reads its positions.
enum class Pooling { Max, Mean, Cls, Lse };
/// model.token_embedding.
enum class TokenEmbedding { Table, Numeric };
/// model.attention.qkv.
enum class Qkv { Projected, Embedded };
/// model.attention.weights.
enum class AttentionWeights { Softmax, StickBreaking };
/// model.attention.length_scaling_in.
enum class LengthScalingIn { EveryBlock, NopeBlocks };
/// model.attention.qk_norm_over.
enum class QkNormOver { Head, Width };
/// model.positional.apply_to.
enum class ApplyTo { Auto, Input, EveryLayer };
/// model.positional.task_ids.
enum class TaskIds { Input, Both };
/// train.device.
enum class Device { Auto, Cpu, Cuda };
/// train.precision.
enum class Precision { Float32, Bf16 };
/// train.cuda_graphs.
enum class CudaGraphs { Auto, On, Off };
/// train.backend.
enum class CollectiveBackend { Auto, Gloo, Nccl };
/// train.trainable.
enum class Trainable { All, HeadScale };

/// One value of a choice enum: its name in a config and what it does.
template <class E>
struct Choice {
  E value;
  const char* name;
  const char* doc;
};

/// Every value of `E` in its declared order (defined in choices.cpp for each enum above).
template <class E>
const std::vector<Choice<E>>& choices();

/// The name a config gives `value`.
template <class E>
std::string name_of(E value) {
  for (const auto& c : choices<E>())
    if (c.value == value) return c.name;
  throw std::logic_error("a choice value without a name in choices.cpp");
}

/// Every name of `E`, in order.
template <class E>
std::vector<std::string> choice_names() {
  std::vector<std::string> out;
  for (const auto& c : choices<E>()) out.push_back(c.name);
  return out;
}

/// The value named `name`; a ConfigError "\"x\" is not one of a, b, c" otherwise.
template <class E>
E choice_from_name(const std::string& name);

/// Every choice enum, once: choices.cpp defines for each what is declared here.
#define POSENC_CHOICE_ENUMS(X) \
  X(ModelKind)                 \
  X(Pooling)                   \
  X(TokenEmbedding)            \
  X(Qkv)                       \
  X(AttentionWeights)          \
  X(LengthScalingIn)           \
  X(QkNormOver)                \
  X(ApplyTo)                   \
  X(TaskIds)                   \
  X(Device)                    \
  X(Precision)                 \
  X(CudaGraphs)                \
  X(CollectiveBackend)         \
  X(Trainable)

// Each enum's table, its name on a stream, and JSON as its names (nlohmann
// finds these by argument-dependent lookup): a name that is not one of the
// choices throws a ConfigError that lists them.
#define POSENC_DECLARE_CHOICE(E)                     \
  template <>                                        \
  const std::vector<Choice<E>>& choices<E>();        \
  void to_json(nlohmann::json& j, E value);          \
  void from_json(const nlohmann::json& j, E& value); \
  std::ostream& operator<<(std::ostream& out, E value);
POSENC_CHOICE_ENUMS(POSENC_DECLARE_CHOICE)
#undef POSENC_DECLARE_CHOICE

}  // namespace posenc
