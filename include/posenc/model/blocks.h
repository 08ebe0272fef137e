// The blocks every model kind stacks: a pre-LN transformer block (attention,
// then the feed-forward) and an encoder_decoder's decoder block (causal
// self-attention, cross-attention to the encoder's output, the feed-forward).
// A block calls the positional scheme instance it is handed, or none; which
// instance acts where is the model's decision (SchemePlacement).
#pragma once

#include <torch/torch.h>

#include "posenc/model/attention.h"
#include "posenc/positional/scheme.h"

namespace posenc {

struct BlockOptions {
  BlockOptions(int64_t d_model, int64_t heads, int64_t d_ff) : d_model_(d_model), heads_(heads), d_ff_(d_ff) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, heads);
  /// Width of the feed-forward's hidden layer.
  TORCH_ARG(int64_t, d_ff);
  /// After the attention and the feed-forward, and on the attention probabilities.
  TORCH_ARG(double, dropout) = 0.0;
  /// Self-attention under a causal mask (the decoder).
  TORCH_ARG(bool, causal) = false;
  /// false: the block's attention has no W_qkv and is handed q, k, v (the embedded-QKV first block).
  TORCH_ARG(bool, project_input) = true;
  /// Scalable-Softmax and LogN scaling in every attention of the block.
  TORCH_ARG(LengthFactors, length_factors) = {};
  /// Stick-breaking weights instead of the softmax in the block's (causal) self-attention.
  TORCH_ARG(bool, stick_breaking) = false;
  /// Sliding-window self-attention: the keys fewer than this many tokens away (0: every key).
  TORCH_ARG(int64_t, window) = 0;
  /// QK-norm in every attention of the block (self and cross).
  TORCH_ARG(bool, qk_norm) = false;
  /// With qk_norm: over the whole width before the heads split, not per head.
  TORCH_ARG(bool, qk_norm_whole_width) = false;
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const BlockOptions& options);
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

/// An encoder_decoder's decoder block: causal self-attention, then
/// cross-attention from the target to the encoder's output, then the
/// feed-forward, each pre-LN with a residual connection.
class DecoderBlockImpl : public torch::nn::Module {
 public:
  /// options.causal() and options.project_input() are ignored: the self-attention
  /// is causal and projected, the cross-attention neither.
  explicit DecoderBlockImpl(const BlockOptions& options);
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

}  // namespace posenc
