// The names and docs of every choice enum (choices.h): the one table each.
#include "posenc/choices.h"

#include "posenc/errors.h"

namespace posenc {

template <>
const std::vector<Choice<ModelKind>>& choices() {
  static const std::vector<Choice<ModelKind>> c = {
      {ModelKind::Encoder, "encoder", "bidirectional blocks, pooled into a classifier"},
      {ModelKind::Decoder, "decoder", "causal blocks and a next-token head"},
      {ModelKind::EncoderDecoder, "encoder_decoder",
       "a bidirectional encoder over the source, a causal decoder with cross-attention over the target"},
  };
  return c;
}

template <>
const std::vector<Choice<Pooling>>& choices() {
  static const std::vector<Choice<Pooling>> c = {
      {Pooling::Max, "max", "the maximum of each feature over the positions"},
      {Pooling::Mean, "mean", "the mean of each feature over the positions"},
      {Pooling::Cls, "cls", "a CLS token's output (the token sits in front, at position 0)"},
      {Pooling::Lse, "lse",
       "tau * log(mean exp(x / tau)) of each feature, a learned temperature tau per feature (mean as tau grows, max "
       "as it shrinks)"},
  };
  return c;
}

template <>
const std::vector<Choice<TokenEmbedding>>& choices() {
  static const std::vector<Choice<TokenEmbedding>> c = {
      {TokenEmbedding::Table, "table", "one learned row per token value"},
      {TokenEmbedding::Numeric, "numeric",
       "an encoder's token values v through fixed sinusoids of v at geometric scales and a learned projection: no "
       "row per value, so a vocabulary of 10^5 costs what 64 does"},
  };
  return c;
}

template <>
const std::vector<Choice<Qkv>>& choices() {
  static const std::vector<Choice<Qkv>> c = {
      {Qkv::Projected, "projected", "q, k, v from one learned projection W_qkv in every block"},
      {Qkv::Embedded, "embedded",
       "block 1's q, k, v are thirds of a 3 x d_model wide token table (Attention Positional Encoding); its residual "
       "stream starts from v"},
  };
  return c;
}

template <>
const std::vector<Choice<AttentionWeights>>& choices() {
  static const std::vector<Choice<AttentionWeights>> c = {
      {AttentionWeights::Softmax, "softmax", "softmax over the keys a query sees"},
      {AttentionWeights::StickBreaking, "stick_breaking",
       "stick-breaking attention (Tan et al. 2024): going back from the query, each earlier key j takes the share "
       "sigmoid(z_ij) of the weight the keys between them left over, and the query's own value takes what remains; "
       "a decoder only, and meant with model.positional.type none: the order of the keys is the position"},
  };
  return c;
}

template <>
const std::vector<Choice<LengthScalingIn>>& choices() {
  static const std::vector<Choice<LengthScalingIn>> c = {
      {LengthScalingIn::EveryBlock, "every_block", "in every attention"},
      {LengthScalingIn::NopeBlocks, "nope_blocks",
       "only in the blocks model.positional.nope_every leaves without positions (their self-attention and, in an "
       "encoder_decoder's decoder, their cross-attention); the positional blocks keep the plain logits"},
  };
  return c;
}

template <>
const std::vector<Choice<QkNormOver>>& choices() {
  static const std::vector<Choice<QkNormOver>> c = {
      {QkNormOver::Head, "head",
       "each head's query and key over the head's own channels, with gains of the head's size shared by the heads "
       "(Gemma 3, Qwen3): every head's logits are bounded alike"},
      {QkNormOver::Width, "width",
       "the whole query and key vectors over all d_model channels before the heads split, with gains of d_model "
       "(OLMo 2): the heads share one norm, so a head may take a larger share of it than another, and a logit is "
       "bounded by heads times the per-head bound"},
  };
  return c;
}

template <>
const std::vector<Choice<ApplyTo>>& choices() {
  static const std::vector<Choice<ApplyTo>> c = {
      {ApplyTo::Auto, "auto",
       "the scheme's natural place: embeddings before block 1, attention schemes in every layer"},
      {ApplyTo::Input, "input", "before block 1, or in block 1's attention only"},
      {ApplyTo::EveryLayer, "every_layer", "in every block's attention"},
  };
  return c;
}

template <>
const std::vector<Choice<TaskIds>>& choices() {
  static const std::vector<Choice<TaskIds>> c = {
      {TaskIds::Input, "input", "the input scheme reads the task's ids; model.positional.type counts 0..L-1"},
      {TaskIds::Both, "both", "model.positional.type reads them in attention too"},
  };
  return c;
}

template <>
const std::vector<Choice<Device>>& choices() {
  static const std::vector<Choice<Device>> c = {
      {Device::Auto, "auto", "CUDA when LibTorch sees a GPU, else the CPU"},
      {Device::Cpu, "cpu", "the CPU"},
      {Device::Cuda, "cuda", "the GPU; an error where there is none"},
  };
  return c;
}

template <>
const std::vector<Choice<Precision>>& choices() {
  static const std::vector<Choice<Precision>> c = {
      {Precision::Float32, "float32", "float32 throughout"},
      {Precision::Bf16, "bf16",
       "the forward pass autocast to bfloat16; weights, gradients and AdamW stay float32 (meant for CUDA)"},
  };
  return c;
}

template <>
const std::vector<Choice<CudaGraphs>>& choices() {
  static const std::vector<Choice<CudaGraphs>> c = {
      {CudaGraphs::Auto, "auto",
       "on CUDA where every step has the same shapes and nothing in it is decided on the host; the log says why not"},
      {CudaGraphs::On, "on", "always; a run that cannot be captured is a config error"},
      {CudaGraphs::Off, "off", "never"},
  };
  return c;
}

template <>
const std::vector<Choice<CollectiveBackend>>& choices() {
  static const std::vector<Choice<CollectiveBackend>> c = {
      {CollectiveBackend::Auto, "auto", "gloo on the CPU, nccl on CUDA"},
      {CollectiveBackend::Gloo, "gloo", "Gloo (CPU tensors)"},
      {CollectiveBackend::Nccl, "nccl", "NCCL (CUDA tensors)"},
  };
  return c;
}

template <>
const std::vector<Choice<Trainable>>& choices() {
  static const std::vector<Choice<Trainable>> c = {
      {Trainable::All, "all", "every parameter of the model"},
      {Trainable::HeadScale, "head_scale",
       "only the per-head logit scales of model.attention.head_scale; every other weight stays as "
       "train.init_from's checkpoint has it"},
  };
  return c;
}

template <class E>
E choice_from_name(const std::string& name) {
  std::string known;
  for (const auto& c : choices<E>()) {
    if (name == c.name) return c.value;
    known += (known.empty() ? "" : ", ") + std::string(c.name);
  }
  throw ConfigError(nlohmann::json(name).dump() + " is not one of " + known);
}

#define POSENC_DEFINE_CHOICE(E)                                                                                     \
  template E choice_from_name<E>(const std::string&);                                                               \
  void to_json(nlohmann::json& j, E value) { j = name_of(value); }                                                  \
  std::ostream& operator<<(std::ostream& out, E value) { return out << name_of(value); }                            \
  void from_json(const nlohmann::json& j, E& value) {                                                               \
    if (!j.is_string()) throw ConfigError("expected a string, one of " + nlohmann::json(choice_names<E>()).dump()); \
    value = choice_from_name<E>(j.get<std::string>());                                                              \
  }
POSENC_CHOICE_ENUMS(POSENC_DEFINE_CHOICE)
#undef POSENC_DEFINE_CHOICE

}  // namespace posenc
