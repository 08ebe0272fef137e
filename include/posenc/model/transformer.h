// The interface every model kind offers, and the parts the kinds share.
//
// Three kinds (model.kind), one module each, over the same blocks:
//
//   encoder          tokens (B, L) -> logits (B, 2): bidirectional attention,
//                    pooled, classified (the ordering task)      model/encoder.h
//   decoder          tokens (B, L) -> logits (B, L, V + 2): causal mask,
//                    next-token head, a KV cache for decoding    model/decoder.h
//   encoder_decoder  source (B, S), target (B, A) -> logits (B, A, V + 2): a
//                    bidirectional encoder over the source, a causal decoder
//                    over the target whose blocks also attend to the
//                    encoder's output                    model/encoder_decoder.h
//
// `Transformer` holds any of them. The trainer, evaluation, checkpoints, CUDA
// graphs and data parallel use the model through TransformerImpl (parameters,
// lengths, what its schemes allow, attention maps, FLOPs); the ones that
// predict a token through NextTokenModel; the classifier is EncoderImpl.
//
// Positional schemes are built from the registry once, in the kind's
// constructor, with their placement (SchemePlacement: input / every layer,
// shared / per layer); blocks receive the scheme instance they should call.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/blocks.h"
#include "posenc/model/numeric_embedding.h"
#include "posenc/positional/scheme.h"

namespace posenc {

/// The encoder's output as an encoder_decoder's decoder reads it.
struct EncoderMemory {
  torch::Tensor states;   ///< (B, S, D), after the encoder's final LayerNorm
  torch::Tensor padding;  ///< (B, S) bool, true at padding tokens of the source
  int64_t length = 0;     ///< S
};

/// Keys and values of the positions decoded so far, per block (decoder and
/// encoder_decoder); for an encoder_decoder also the encoder's output and each
/// block's cross-attention keys and values (begin_decoding fills them).
struct KVCache {
  std::vector<LayerCache> layers;
  int64_t length = 0;       ///< positions held (ids 0..length-1)
  torch::Tensor task_keys;  ///< (B, length): the ids a task gave the cached tokens, where attention reads them
  int64_t task_end = 0;     ///< one past the largest of task_keys (an upper bound after select_cache_rows)
  EncoderMemory memory;
  std::vector<LayerCache> cross;
};

/// The attention logit factors a config asks for in block `index` (from 0) of a stack
/// (model.attention.log_length_scale, logn_from and temperature_from where length_scaling_in places them,
/// head_scale, logit_scale).
inline LengthFactors length_factors_of(const ModelConfig& cfg, int64_t index) {
  const bool scaled = cfg.length_scaling_in_block(index);
  return {scaled ? cfg.log_length_scale : 0.0, scaled ? cfg.logn_from : 0, cfg.head_scale, cfg.logit_scale,
          scaled ? cfg.temperature_from : 0,   cfg.temperature_beta};
}

/// Keeps rows `rows` (int64, on the model's device) of every cached tensor, in
/// that order (beam search follows the surviving hypotheses).
void select_cache_rows(KVCache& cache, const torch::Tensor& rows);

/// The placed instances of one positional scheme over a stack of blocks.
struct SchemePlacement {
  std::vector<PositionalSchemeImpl*> embed_at;     ///< per block: scheme whose embed() runs before it
  std::vector<PositionalSchemeImpl*> attend_with;  ///< per block: scheme handed to its attention
};

/// A model that predicts the next token: decoder and encoder_decoder. Rows are
/// a task's `x SEP y`: the prompt x SEP, then the answer y from `answer_start`.
class NextTokenModel {
 public:
  virtual ~NextTokenModel() = default;
  /// Teacher-forced: rows (B, T) -> (B, A, V + 2), A = T - answer_start, row p
  /// predicting token answer_start + p. `ids` (L) replace the default position
  /// ids (randomized positions); `task_positions` (B, T) on the CPU are the ids a
  /// task defines per token (a decoder only).
  virtual torch::Tensor answer_logits(const torch::Tensor& tokens, int64_t answer_start, const torch::Tensor& ids = {},
                                      const torch::Tensor& task_positions = {}) = 0;
  /// Starts decoding after `prompt` (B, P), `x SEP`: resets `cache` to what the
  /// model keeps before the decoded part (an encoder_decoder encodes x there) and
  /// returns the tokens the decoder reads first (the prompt; SEP alone for an
  /// encoder_decoder), to hand to decode() or decode_uncached().
  virtual torch::Tensor begin_decoding(const torch::Tensor& prompt, KVCache& cache) = 0;
  /// tokens (B, n) at positions cache.length.. -> logits (B, n, V + 2),
  /// appending their keys and values to `cache`. Equal to the last n rows of
  /// decode_uncached() over everything decoded so far. `task_positions` (B, n):
  /// the new tokens' task-defined ids.
  virtual torch::Tensor decode(const torch::Tensor& tokens, KVCache& cache,
                               const torch::Tensor& task_positions = {}) = 0;
  /// Without keys and values: every token decoded so far (B, n) -> (B, n, V + 2)
  /// (over the encoder's output in `cache` for an encoder_decoder).
  virtual torch::Tensor decode_uncached(const torch::Tensor& tokens, const KVCache& cache,
                                        const torch::Tensor& task_positions = {}) = 0;
};

class TransformerImpl : public torch::nn::Module {
 public:
  /// The model as a next-token model: null for the encoder (a classifier).
  virtual NextTokenModel* next_token() { return nullptr; }
  /// A next-token model: decoder or encoder_decoder (not the classifier).
  bool is_decoder() const { return cfg_.kind != ModelKind::Encoder; }

  /// Positions the model runs for an example of `tokens` tokens: one more for
  /// the encoder's CLS token, one fewer for a next-token model (the last token is
  /// only predicted); for an encoder_decoder, an upper bound (source and target
  /// together, `x SEP y` less its last token).
  virtual int64_t model_length(int64_t tokens) const = 0;
  /// FLOPs of one forward over a batch of `batch` examples of `length` tokens,
  /// counted from the shapes: matrix products (2 per multiply-add), attention
  /// scores and p·v, and what the schemes add (their *_flops hooks).
  virtual double forward_flops(int64_t batch, int64_t length) const = 0;

  /// Checks that every scheme can encode an example of `tokens` tokens; throws ConfigError otherwise.
  /// With `task_positions` (the task defines its ids), the schemes that embed read
  /// those ids, whose bound the config checks (TaskInfo::positions_end), and are skipped.
  void check_length(int64_t tokens, bool task_positions = false) const;
  /// Whether every scheme gives the same scores from a KV cache as from the whole
  /// sequence (PositionalSchemeImpl::supports_kv_cache); if not, greedy decoding
  /// reruns the whole sequence for each new token.
  bool supports_kv_cache() const;
  /// Whether every scheme can be captured in a CUDA graph (PositionalSchemeImpl::capturable).
  bool capturable() const;
  /// True where some positional parameter is a per-position table (untrained rows past training).
  bool has_position_table() const;
  bool directional() const;

  /// Keep the attention probabilities of every block on the next forward.
  void keep_attention(bool keep);
  /// Per attention module: (B, H, Lq, Lk), in the order of attention_modules().
  std::vector<torch::Tensor> attention_maps() const;
  /// Per attention module, what that forward multiplied its logits by (1|B, H|1, Lq|1, 1), in the order of
  /// attention_modules(); undefined where no logit factor is on (MultiHeadAttentionImpl::last_logit_factor).
  std::vector<torch::Tensor> attention_logit_factors() const;
  /// Keep, on the next forward of the stack of blocks, the residual stream
  /// entering each block (after any scheme that adds positions there) and the
  /// one leaving the last (before the final LayerNorm): hidden_states() then
  /// holds model.layers + 1 tensors (B, L, D) ((B, L, 3D) entering an embedded
  /// QKV block 1). For an encoder_decoder, its encoder's stack, and
  /// decoder_hidden_states() its decoder's.
  void keep_hidden_states(bool keep) {
    keep_hidden_ = keep;
    hidden_.clear();
    decoder_hidden_.clear();
  }
  const std::vector<torch::Tensor>& hidden_states() const { return hidden_; }
  /// An encoder_decoder's decoder, kept as hidden_states() keeps the encoder:
  /// decoder_layers + 1 tensors (B, A, D) over the target it read; empty for
  /// the other kinds.
  const std::vector<torch::Tensor>& decoder_hidden_states() const { return decoder_hidden_; }
  /// Forces the explicit attention path in every block.
  void force_explicit_attention(bool on);
  /// Whether every block runs the fused attention kernel (LibTorch 2.x, schemes
  /// without score, value or reweighting hooks), which never holds the
  /// (B, H, L, L) probabilities; memory estimates count them only when not.
  bool fuses_attention() const;

  const ModelConfig& config() const { return cfg_; }
  /// The scheme instance acting at the first layer it acts at (null for none).
  PositionalSchemeImpl* first_scheme() const { return schemes_.empty() ? nullptr : schemes_.front().get(); }
  /// The model.positional.type instance block `block` (1-based, of the stack:
  /// the encoder's for encoder_decoder) runs: the one in its attention (without
  /// model.positional.with's beside it), else the one adding positions before
  /// it; null where none acts at that block.
  PositionalSchemeImpl* scheme_at_block(int64_t block) const;
  /// The model.positional.with instance in block `block`'s attention (1-based,
  /// of the stack), beside model.positional.type's; null where none acts there.
  PositionalSchemeImpl* with_scheme_at_block(int64_t block) const;
  /// The model.positional.input scheme, before block 1 (null where there is none).
  PositionalSchemeImpl* input_scheme() const { return input_scheme_; }
  /// Token ids run 0 (padding) .. vocab_size + 1 (CLS for the encoder, SEP for the others).
  int64_t cls_token() const { return vocab_size_ + 1; }
  int64_t vocab_size() const { return vocab_size_; }

 protected:
  /// Registers nothing: each kind's constructor registers its parts with the
  /// helpers below, in the order of its parameters (which the optimizer's
  /// state in a checkpoint follows, and the initial draws too).
  TransformerImpl(const ModelConfig& cfg, int64_t vocab_size);

  /// "tokens" (the table; 3 * d_model wide for embedded QKV) or "numeric_tokens", then "embed_drop".
  void register_token_embedding();
  /// The stack's schemes ("positional"[layer], and "input_positional" for
  /// model.positional.input), placed by model.positional.apply_to.
  void place_stack_schemes(bool causal);
  /// Instances of `type` for `layers` blocks (names: prefix + "positional"[+ layer]),
  /// where `apply_to` says (Auto: the scheme's default placement). `self_attention`: the stack's own scheme,
  /// which leaves out the blocks model.positional.nope_every names (not the input or cross slot's).
  SchemePlacement place_scheme(const std::string& type, const nlohmann::json& options, int64_t layers, bool causal,
                               const std::string& prefix, ApplyTo apply_to, bool self_attention);
  /// model.positional.with: its instances (names: prefix + "with_positional"[+ layer]) placed as
  /// type is, and each block of `placed` that holds both handed their pair (positional/scheme_pair.h).
  void pair_with(SchemePlacement& placed, const nlohmann::json& with_options, int64_t layers, bool causal,
                 const std::string& prefix);
  /// "blocks" (model.layers of them) and "final_ln".
  void register_stack(bool causal);
  /// "head": d_model -> outputs; checks what model.positional.randomize draws against every scheme.
  void register_head(int64_t outputs);

  /// Position ids begin..end-1 (int64) on the device of `like`.
  static torch::Tensor id_range(int64_t begin, int64_t end, const torch::Tensor& like);
  /// The position ids of tokens (B, L): `given` (L sorted int64 ids on the CPU)
  /// on the tokens' device, or 0..L-1; `end` gets one past the largest.
  static torch::Tensor position_ids(const torch::Tensor& tokens, const torch::Tensor& given, int64_t* end);
  /// The stack over tokens (B, L) at position ids (L) -> (B, L, D), after the final LayerNorm.
  /// `padding` (B, L) bool marks padding tokens (encoder_decoder's source), or is undefined.
  /// `task_positions` (B, L) on the CPU, or undefined: the embedding scheme's ids.
  torch::Tensor run_stack(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end, KVCache* cache,
                          const torch::Tensor& padding = {}, const torch::Tensor& task_positions = {});
  /// tokens (B, L) -> (B, L, D) (or 3D for embedded QKV): the table, or the numeric embedding, then dropout.
  torch::Tensor embed_tokens(const torch::Tensor& tokens);
  /// FLOPs of `n` blocks placed by `at` over `length` positions (their self-attention
  /// and feed-forward); `first_projects` false: block 1 has no W_qkv (embedded QKV).
  double blocks_flops(const SchemePlacement& at, int64_t n, int64_t batch, int64_t length, bool first_projects) const;
  /// FLOPs of the stack over `length` positions: the input scheme and the blocks.
  double stack_flops(int64_t batch, int64_t length) const;
  /// Every attention module: the stack's blocks in order (an encoder_decoder adds its decoder's).
  virtual std::vector<MultiHeadAttention> attention_modules() const;
  /// Whether keep_hidden_states(true) is on.
  bool keeps_hidden_states() const { return keep_hidden_; }

  ModelConfig cfg_;
  int64_t vocab_size_;
  std::vector<PositionalScheme> schemes_;  // distinct instances
  std::vector<PositionalScheme> pairs_;    // type + with per block (model.positional.with); not modules
  // Each pair's instances of model.positional.type and .with (scheme_at_block and
  // with_scheme_at_block answer with them).
  struct PairParts {
    PositionalSchemeImpl* type;
    PositionalSchemeImpl* with;
  };
  std::unordered_map<const PositionalSchemeImpl*, PairParts> parts_of_pair_;
  SchemePlacement stack_schemes_;                 // per block of the stack
  PositionalSchemeImpl* input_scheme_ = nullptr;  // model.positional.input: its embed() runs before block 1
  std::vector<Block> blocks_;
  torch::nn::LayerNorm final_ln_{nullptr};
  torch::nn::Linear head_{nullptr};
  std::vector<torch::Tensor> decoder_hidden_;  // an encoder_decoder's decoder_hidden_states()

 private:
  torch::nn::Embedding tokens_{nullptr};
  NumericEmbedding numeric_tokens_{nullptr};  // model.token_embedding=numeric (then tokens_ is null)
  torch::nn::Dropout embed_drop_{nullptr};
  bool keep_hidden_ = false;           // keep_hidden_states()
  std::vector<torch::Tensor> hidden_;  // what the last forward of the stack kept
};

/// Any model kind. Transformer(cfg, vocab_size) builds the one cfg.kind names.
class Transformer : public torch::nn::ModuleHolder<TransformerImpl> {
 public:
  Transformer(std::nullptr_t) : ModuleHolder(nullptr) {}  // NOLINT(google-explicit-constructor)
  explicit Transformer(std::shared_ptr<TransformerImpl> model) : ModuleHolder(std::move(model)) {}
  /// A kind's own handle (Encoder, Decoder, EncoderDecoder) as a Transformer.
  template <class Kind>
  Transformer(const torch::nn::ModuleHolder<Kind>& kind)  // NOLINT(google-explicit-constructor)
      : ModuleHolder(std::shared_ptr<TransformerImpl>(kind.ptr())) {}
  Transformer(const ModelConfig& cfg, int64_t vocab_size);
};

/// The model as a next-token model; throws naming `what` needs one for the encoder.
NextTokenModel& next_token_model(Transformer& model, const std::string& what);

}  // namespace posenc
