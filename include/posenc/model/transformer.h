// Pre-LN transformer encoder for sequence classification.
//
// tokens (B, L) -> logits (B, 2). Positional schemes are built from the
// registry once, here, with their placement (input / every layer, shared /
// per layer); blocks receive the scheme instance they should call, or none.
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
  torch::Tensor forward(const torch::Tensor& x, PositionalSchemeImpl* scheme, const Positions& pos);
  /// Embedded-QKV first block: q, k, v (B, L, D) from the token table; v is the residual stream.
  torch::Tensor forward_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            PositionalSchemeImpl* scheme, const Positions& pos);
  MultiHeadAttention attention{nullptr};

 private:
  torch::Tensor feed_forward(const torch::Tensor& h);
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear ff1_{nullptr}, ff2_{nullptr};
  torch::nn::Dropout drop_{nullptr};
};
TORCH_MODULE(Block);

class EncoderClassifierImpl : public torch::nn::Module {
 public:
  EncoderClassifierImpl(const ModelConfig& cfg, int64_t vocab_size);

  /// tokens (B, L) int64 in 1..vocab_size -> logits (B, 2).
  /// Position ids default to 0..L-1 (0..L with the CLS token in front); `ids`,
  /// when given, replaces them: model_length(L) sorted int64 ids on the CPU
  /// (randomized positions in training).
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& ids = {});

  /// Sequence length the model actually runs for `length` tokens (adds the CLS token).
  int64_t model_length(int64_t length) const { return length + (cfg_.pooling == "cls" ? 1 : 0); }
  /// Checks that every scheme can encode sequences of `length` tokens; throws ConfigError otherwise.
  void check_length(int64_t length) const;
  /// True where some positional parameter is a per-position table (untrained rows past training).
  bool has_position_table() const;
  bool directional() const;

  /// FLOPs of one forward over a batch of `batch` sequences of `length` tokens,
  /// counted from the shapes: matrix products (2 per multiply-add), attention
  /// scores and p·v, and what the schemes add (their *_flops hooks).
  double forward_flops(int64_t batch, int64_t length) const;

  /// Keep the attention probabilities of every block on the next forward.
  void keep_attention(bool keep);
  std::vector<torch::Tensor> attention_maps() const;  // per block: (B, H, L, L)
  /// Forces the explicit attention path in every block.
  void force_explicit_attention(bool on);

  const ModelConfig& config() const { return cfg_; }
  /// The scheme instance acting at the first layer it acts at (null for none).
  PositionalSchemeImpl* first_scheme() const { return schemes_.empty() ? nullptr : schemes_.front().get(); }
  int64_t cls_token() const { return vocab_size_ + 1; }

 private:
  ModelConfig cfg_;
  int64_t vocab_size_;
  torch::nn::Embedding tokens_{nullptr};
  std::vector<PositionalScheme> schemes_;               // distinct instances
  std::vector<PositionalSchemeImpl*> embed_at_;       // per block: scheme whose embed() runs before it
  std::vector<PositionalSchemeImpl*> attend_with_;    // per block: scheme handed to its attention
  torch::nn::ModuleList blocks_{nullptr};
  std::vector<Block> block_refs_;
  torch::nn::LayerNorm final_ln_{nullptr};
  torch::nn::Linear head_{nullptr};
  torch::nn::Dropout embed_drop_{nullptr};
};
TORCH_MODULE(EncoderClassifier);

}  // namespace posenc
