// Pre-LN transformer, in two kinds (model.kind):
//
//   encoder  tokens (B, L) -> logits (B, 2): bidirectional attention, pooled,
//            classified (the ordering task);
//   decoder  tokens (B, L) -> logits (B, L, V + 2): causal mask, next-token head;
//            decode() continues from a KV cache, one forward per new token.
//
// Positional schemes are built from the registry once, here, with their
// placement (input / every layer, shared / per layer); blocks receive the
// scheme instance they should call, or none.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/attention.h"
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

/// Keys and values of the positions decoded so far, per block (decoder only).
struct KVCache {
  std::vector<LayerCache> layers;
  int64_t length = 0;  ///< positions held (ids 0..length-1)
};

class TransformerImpl : public torch::nn::Module {
 public:
  /// Token ids 0 (padding) .. vocab_size + 1 (CLS for the encoder, SEP for the decoder).
  TransformerImpl(const ModelConfig& cfg, int64_t vocab_size);

  /// Encoder: tokens (B, L) int64 -> logits (B, 2).
  /// Decoder: tokens (B, L) -> next-token logits (B, L, vocab_size + 2), causal.
  /// Position ids default to 0..L-1 (0..L with the CLS token in front); `ids`,
  /// when given, replaces them: L (plus CLS) sorted int64 ids on the CPU
  /// (randomized positions in training).
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& ids = {});

  /// Decoder only: tokens (B, n) at positions cache.length.. -> logits (B, n, V + 2),
  /// appending their keys and values to `cache` (empty at the start of a sequence).
  /// Equal to the last n rows of forward() on the whole sequence.
  torch::Tensor decode(const torch::Tensor& tokens, KVCache& cache);
  /// Whether every scheme gives the same scores from a KV cache as from the whole
  /// sequence (PositionalSchemeImpl::supports_kv_cache); if not, greedy decoding
  /// runs forward() on the whole sequence for each new token.
  bool supports_kv_cache() const;

  bool is_decoder() const { return cfg_.kind == "decoder"; }
  /// Positions the model runs for an example of `tokens` tokens: one more for
  /// the encoder's CLS token, one fewer for the decoder (the last token is only predicted).
  int64_t model_length(int64_t tokens) const {
    return is_decoder() ? tokens - 1 : tokens + (cfg_.pooling == "cls" ? 1 : 0);
  }
  /// Checks that every scheme can encode an example of `tokens` tokens; throws ConfigError otherwise.
  void check_length(int64_t tokens) const;
  /// True where some positional parameter is a per-position table (untrained rows past training).
  bool has_position_table() const;
  bool directional() const;

  /// FLOPs of one forward over a batch of `batch` examples of `length` tokens,
  /// counted from the shapes: matrix products (2 per multiply-add), attention
  /// scores and p·v, and what the schemes add (their *_flops hooks).
  double forward_flops(int64_t batch, int64_t length) const;

  /// Keep the attention probabilities of every block on the next forward.
  void keep_attention(bool keep);
  std::vector<torch::Tensor> attention_maps() const;  // per block: (B, H, L, L)
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
  torch::Tensor hidden(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end, KVCache* cache);
  ModelConfig cfg_;
  int64_t vocab_size_;
  torch::nn::Embedding tokens_{nullptr};
  std::vector<PositionalScheme> schemes_;           // distinct instances
  std::vector<PositionalSchemeImpl*> embed_at_;     // per block: scheme whose embed() runs before it
  std::vector<PositionalSchemeImpl*> attend_with_;  // per block: scheme handed to its attention
  torch::nn::ModuleList blocks_{nullptr};
  std::vector<Block> block_refs_;
  torch::nn::LayerNorm final_ln_{nullptr};
  torch::nn::Linear head_{nullptr};
  torch::nn::Dropout embed_drop_{nullptr};
};
TORCH_MODULE(Transformer);

}  // namespace posenc
