// Pre-LN transformer, in three kinds (model.kind):
//
//   encoder          tokens (B, L) -> logits (B, 2): bidirectional attention,
//                    pooled, classified (the ordering task);
//   decoder          tokens (B, L) -> logits (B, L, V + 2): causal mask,
//                    next-token head; decode() continues from a KV cache, one
//                    forward per new token;
//   encoder_decoder  source (B, S), target (B, A) -> logits (B, A, V + 2): a
//                    bidirectional encoder over the source, a causal decoder
//                    over the target whose blocks attend to the encoder's
//                    output (self-attention, cross-attention, feed-forward).
//                    The token table and the output head are shared by both
//                    sides; each side counts its positions from 0.
//
// Positional schemes are built from the registry once, here, with their
// placement (input / every layer, shared / per layer); blocks receive the
// scheme instance they should call, or none.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/attention.h"
#include "posenc/model/numeric_embedding.h"
#include "posenc/positional/scheme.h"

namespace posenc {

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& cfg, bool project_input);
  /// x (B, L, D) -> (B, L, D)
  torch::Tensor forward(const torch::Tensor& x, PositionalSchemeImpl* scheme, const Positions& pos,
                        LayerCache* cache = nullptr);
  /// Embedded-QKV first block: q, k, v (B, L, D) from the token table; v is the residual stream.
  torch::Tensor forward_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            PositionalSchemeImpl* scheme, const Positions& pos, LayerCache* cache = nullptr);
  MultiHeadAttention attention{nullptr};

 private:
  torch::Tensor feed_forward(const torch::Tensor& h);
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear ff1_{nullptr}, ff2_{nullptr};
  torch::nn::Dropout drop_{nullptr};
};
TORCH_MODULE(Block);

/// The encoder's output as an encoder_decoder's decoder reads it.
struct EncoderMemory {
  torch::Tensor states;   ///< (B, S, D), after the encoder's final LayerNorm
  torch::Tensor padding;  ///< (B, S) bool, true at padding tokens of the source
  int64_t length = 0;     ///< S
};

/// An encoder_decoder's decoder block: causal self-attention, then
/// cross-attention from the target to the encoder's output, then the
/// feed-forward, each pre-LN with a residual connection.
class DecoderBlockImpl : public torch::nn::Module {
 public:
  explicit DecoderBlockImpl(const ModelConfig& cfg);
  /// x (B, A, D) -> (B, A, D). `cross` holds the memory's keys and values
  /// projected for this block ((B, S, D) each; cross_keys_values makes them).
  torch::Tensor forward(const torch::Tensor& x, PositionalSchemeImpl* scheme, const Positions& pos, LayerCache* cache,
                        const LayerCache& cross, PositionalSchemeImpl* cross_scheme, const Positions& cross_pos);
  /// The memory's keys and values for cross-attention: computed once per source.
  LayerCache cross_keys_values(const torch::Tensor& memory);
  MultiHeadAttention self_attention{nullptr}, cross_attention{nullptr};

 private:
  torch::nn::LayerNorm ln1_{nullptr}, ln_cross_{nullptr}, ln2_{nullptr};
  torch::nn::Linear cross_q_{nullptr}, cross_kv_{nullptr}, ff1_{nullptr}, ff2_{nullptr};
  torch::nn::Dropout drop_{nullptr};
};
TORCH_MODULE(DecoderBlock);

/// Keys and values of the positions decoded so far, per block (decoder and
/// encoder_decoder); for an encoder_decoder also the encoder's output and each
/// block's cross-attention keys and values (start_decoding fills them).
struct KVCache {
  std::vector<LayerCache> layers;
  int64_t length = 0;       ///< positions held (ids 0..length-1)
  torch::Tensor task_keys;  ///< (B, length): the ids a task gave the cached tokens, where attention reads them
  int64_t task_end = 0;     ///< one past the largest of task_keys (an upper bound after select_cache_rows)
  EncoderMemory memory;
  std::vector<LayerCache> cross;
};

/// The placed instances of one positional scheme over a stack of blocks.
struct SchemePlacement {
  std::vector<PositionalSchemeImpl*> embed_at;     ///< per block: scheme whose embed() runs before it
  std::vector<PositionalSchemeImpl*> attend_with;  ///< per block: scheme handed to its attention
};

class TransformerImpl : public torch::nn::Module {
 public:
  /// Token ids 0 (padding) .. vocab_size + 1 (CLS for the encoder, SEP for the decoder).
  TransformerImpl(const ModelConfig& cfg, int64_t vocab_size);

  /// Encoder: tokens (B, L) int64 -> logits (B, 2).
  /// Decoder: tokens (B, L) -> next-token logits (B, L, vocab_size + 2), causal.
  /// Position ids default to 0..L-1 (0..L with the CLS token in front); `ids`,
  /// when given, replaces them: L (plus CLS) sorted int64 ids on the CPU
  /// (randomized positions in training). `task_positions` (B, L) int64, on the
  /// CPU: the ids a task defines per token (TaskBatch::positions), read by the
  /// embedding scheme (attention keeps counting 0..L-1); a decoder only.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& ids = {},
                        const torch::Tensor& task_positions = {});

  /// Decoder: tokens (B, n) at positions cache.length.. -> logits (B, n, V + 2),
  /// appending their keys and values to `cache` (empty at the start of a sequence).
  /// Equal to the last n rows of forward() on the whole sequence.
  /// encoder_decoder: the same for target tokens, after start_decoding().
  /// `task_positions` (B, n): the new tokens' task-defined ids, as in forward().
  torch::Tensor decode(const torch::Tensor& tokens, KVCache& cache, const torch::Tensor& task_positions = {});

  /// encoder_decoder: source (B, S) (0 = padding, at the end of a row) and the
  /// decoder's input target (B, A) -> next-token logits (B, A, V + 2).
  torch::Tensor encoder_decoder_forward(const torch::Tensor& source, const torch::Tensor& target);
  /// encoder_decoder: source (B, S) -> the encoder's output.
  EncoderMemory encode(const torch::Tensor& source);
  /// encoder_decoder: target (B, A) over `memory`, without a cache -> (B, A, V + 2).
  torch::Tensor decode_target(const torch::Tensor& target, const EncoderMemory& memory);
  /// encoder_decoder: encodes the source into an empty `cache` and computes
  /// every block's cross-attention keys and values, once.
  void start_decoding(const torch::Tensor& source, KVCache& cache);
  /// Keeps rows `rows` (int64, on the model's device) of every cached tensor, in
  /// that order (beam search follows the surviving hypotheses).
  static void select_cache_rows(KVCache& cache, const torch::Tensor& rows);
  /// Whether every scheme gives the same scores from a KV cache as from the whole
  /// sequence (PositionalSchemeImpl::supports_kv_cache); if not, greedy decoding
  /// runs forward() on the whole sequence for each new token.
  bool supports_kv_cache() const;
  /// Whether every scheme can be captured in a CUDA graph (PositionalSchemeImpl::capturable).
  bool capturable() const;

  /// A next-token model: decoder or encoder_decoder (not the classifier).
  bool is_decoder() const { return cfg_.kind != ModelKind::Encoder; }
  bool is_encoder_decoder() const { return cfg_.kind == ModelKind::EncoderDecoder; }
  /// Positions the model runs for an example of `tokens` tokens: one more for
  /// the encoder's CLS token, one fewer for the decoder (the last token is only
  /// predicted); for an encoder_decoder, an upper bound (source and target
  /// together, `x SEP y` less its last token).
  int64_t model_length(int64_t tokens) const {
    return is_decoder() ? tokens - 1 : tokens + (cfg_.pooling == Pooling::Cls ? 1 : 0);
  }
  /// Checks that every scheme can encode an example of `tokens` tokens; throws ConfigError otherwise.
  /// With `task_positions` (the task defines its ids), the schemes that embed read
  /// those ids, whose bound the config checks (TaskInfo::positions_end), and are skipped.
  void check_length(int64_t tokens, bool task_positions = false) const;
  /// True where some positional parameter is a per-position table (untrained rows past training).
  bool has_position_table() const;
  bool directional() const;

  /// FLOPs of one forward over a batch of `batch` examples of `length` tokens,
  /// counted from the shapes: matrix products (2 per multiply-add), attention
  /// scores and p·v, and what the schemes add (their *_flops hooks).
  double forward_flops(int64_t batch, int64_t length) const;

  /// Encoder, one forward: the pooled logits (B, 2), as forward() gives them,
  /// and the classifier applied to each position's output instead of the
  /// pooled one, (B, L, 2) (max, mean and lse pooling). Where a position of a
  /// sorted sequence alone says "not sorted", it would raise a false alarm.
  std::pair<torch::Tensor, torch::Tensor> classify_positions(const torch::Tensor& tokens);

  /// Keep the attention probabilities of every block on the next forward.
  void keep_attention(bool keep);
  /// Per attention module: (B, H, Lq, Lk). The encoder's (or decoder's) blocks
  /// in order; an encoder_decoder's decoder blocks follow, self- then cross-attention each.
  std::vector<torch::Tensor> attention_maps() const;
  /// Forces the explicit attention path in every block.
  void force_explicit_attention(bool on);
  /// Whether every block runs the fused attention kernel (LibTorch 2.x, schemes
  /// without score, value or reweighting hooks), which never holds the
  /// (B, H, L, L) probabilities; memory estimates count them only when not.
  bool fuses_attention() const;

  const ModelConfig& config() const { return cfg_; }
  /// The scheme instance acting at the first layer it acts at (null for none).
  PositionalSchemeImpl* first_scheme() const { return schemes_.empty() ? nullptr : schemes_.front().get(); }
  int64_t cls_token() const { return vocab_size_ + 1; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  /// The blocks over tokens (B, L) at position ids (L) -> (B, L, D), after the final LayerNorm.
  /// `padding` (B, L) bool marks padding tokens (encoder_decoder's source), or is undefined.
  /// `task_positions` (B, L) on the CPU, or undefined: the embedding scheme's ids.
  torch::Tensor hidden(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end, KVCache* cache,
                       const torch::Tensor& padding = {}, const torch::Tensor& task_positions = {});
  /// The decoder blocks of an encoder_decoder over target tokens (B, n) at ids
  /// (n) -> (B, n, D), after its final LayerNorm; `cache` holds the cross keys and values.
  torch::Tensor decoder_hidden(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end, KVCache& cache);
  /// Every attention module, in the order of attention_maps().
  std::vector<MultiHeadAttention> attention_modules() const;
  /// Builds instances of `type` for `layers` blocks (names: prefix + "positional"[+ layer]),
  /// placed by model.positional.apply_to unless `apply_to` is given.
  SchemePlacement place_scheme(const std::string& type, const nlohmann::json& options, int64_t layers, bool causal,
                               const std::string& prefix, ApplyTo apply_to);
  ModelConfig cfg_;
  int64_t vocab_size_;
  /// tokens (B, L) -> (B, L, D) (or 3D for embedded QKV): the table, or the numeric embedding.
  torch::Tensor embed_tokens(const torch::Tensor& tokens);
  /// x (B, L, D) -> (B, D) by model.pooling (the encoder).
  torch::Tensor pool(const torch::Tensor& x) const;
  torch::nn::Embedding tokens_{nullptr};
  NumericEmbedding numeric_tokens_{nullptr};         // model.token_embedding=numeric (then tokens_ is null)
  torch::Tensor log_temperature_;                    // lse pooling: (D), tau = exp(.)
  std::vector<PositionalScheme> schemes_;            // distinct instances
  std::vector<PositionalSchemeImpl*> embed_at_;      // per block: scheme whose embed() runs before it
  std::vector<PositionalSchemeImpl*> attend_with_;   // per block: scheme handed to its attention
  PositionalSchemeImpl* input_scheme_ = nullptr;     // model.positional.input: its embed() runs before block 1
  SchemePlacement decoder_schemes_, cross_schemes_;  // encoder_decoder: its decoder's self- and cross-attention
  torch::nn::ModuleList blocks_{nullptr};
  std::vector<Block> block_refs_;
  std::vector<DecoderBlock> decoder_refs_;  // encoder_decoder
  torch::nn::LayerNorm final_ln_{nullptr}, decoder_final_ln_{nullptr};
  torch::nn::Linear head_{nullptr};
  torch::nn::Dropout embed_drop_{nullptr};
};
TORCH_MODULE(Transformer);

}  // namespace posenc
