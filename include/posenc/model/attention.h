// Multi-head self-attention, used by every block.
//
// q, k, v come either from a projection of the block input (forward) or are
// handed in directly (attend), which is how the "embedded QKV" first block
// works (Attention Positional Encoding, Bhorania: docs/sources.md). The positional scheme's hooks are called here and nowhere
// else: (QK-norm, where on) -> rotate -> scores (+ score_terms) * 1/sqrt(Dh) (+ bias) -> reweight ->
// (* s_h log n, Scalable-Softmax; * log n / log N, LogN; * lambda_h, head scale; where on) -> causal and window
// mask -> softmax (or stick-breaking) -> probs·v (+ value_terms).
#pragma once

#include <torch/torch.h>

#include "posenc/positional/scheme.h"

namespace posenc {

/// One block's keys and values of the positions decoded so far: (B, H, L, Dh),
/// keys already rotated; undefined before the first step. Self-attention
/// appends to them step by step; cross-attention sets them once.
struct LayerCache {
  torch::Tensor k, v;  ///< (B, H, L, Dh); after append, views of the buffers' first L positions

  /// Appends k_new, v_new (B, H, n, Dh). Outside grad mode they are written into
  /// buffers that grow by doubling, so decoding T tokens copies O(T) positions,
  /// not the O(T^2) of a concatenation per step. In grad mode it concatenates:
  /// a write in place would change tensors that backward still needs.
  void append(const torch::Tensor& k_new, const torch::Tensor& v_new);
  /// Keeps rows `rows` (int64) of k and v, in that order (beam search).
  void select_rows(const torch::Tensor& rows);

  torch::Tensor k_buffer, v_buffer;  ///< (B, H, capacity, Dh), or undefined
};

/// How much sharper attention gets as a query sees more keys, per head, and
/// everywhere (model.attention.*); all off by default. MultiHeadAttentionImpl::length_factor.
struct LengthFactors {
  /// > 0: Scalable-Softmax, the logits of a query that sees n keys times
  /// s_h log n, with s_h learned per head and starting here; 0: none.
  double log_length_scale = 0.0;
  /// >= 2: LogN scaling, the logits of a query that sees n > N keys times
  /// log n / log N (no parameter); 0: none.
  int64_t logn_from = 0;
  /// true: the logits of head h times lambda_h, learned and 1 at the start
  /// (Wang et al. 2024's head-based scale); false: none.
  bool head_scale = false;
  /// The logits of every head times this fixed number (no parameter); 1: none.
  double logit_scale = 1.0;
  /// >= 1: Llama 4's attention temperature, the logits of a query that sees n keys times
  /// 1 + temperature_beta log(floor(n / F) + 1) (no parameter); 0: none.
  int64_t temperature_from = 0;
  double temperature_beta = 0.1;
};

struct MultiHeadAttentionOptions {
  MultiHeadAttentionOptions(int64_t d_model, int64_t heads) : d_model_(d_model), heads_(heads) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, heads);
  /// On the attention probabilities (training only).
  TORCH_ARG(double, dropout) = 0.0;
  /// false builds no W_qkv: the caller supplies q, k, v to attend().
  TORCH_ARG(bool, project_input) = true;
  /// A query sees the keys whose position id is not greater than its own.
  TORCH_ARG(bool, causal) = false;
  TORCH_ARG(LengthFactors, length_factors) = {};
  /// Stick-breaking weights (Tan et al. 2024) instead of the softmax; needs causal.
  TORCH_ARG(bool, stick_breaking) = false;
  /// Sliding-window self-attention: a query sees only the keys fewer than this many token slots away (causal:
  /// itself and the window - 1 before it); counted in tokens, not position ids. 0: every key.
  TORCH_ARG(int64_t, window) = 0;
  /// QK-norm: each head's q and k RMS-normalized over its Dh channels, times a learned gain (Dh) each, before
  /// the scheme's hooks.
  TORCH_ARG(bool, qk_norm) = false;
  /// With qk_norm: q and k RMS-normalized over all D channels before the heads split, times a learned gain (D)
  /// each (OLMo 2), instead of per head.
  TORCH_ARG(bool, qk_norm_whole_width) = false;
};

class MultiHeadAttentionImpl : public torch::nn::Module {
 public:
  explicit MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options);

  /// x (B, L, D) -> (B, L, D); scheme may be null (no positional hooks in this block).
  /// With a cache, x holds the new positions only (pos.q their ids, pos.k the ids
  /// of every key: cached and new); their keys and values are appended to it.
  torch::Tensor forward(const torch::Tensor& x, PositionalSchemeImpl* scheme, const Positions& pos,
                        LayerCache* cache = nullptr);
  /// q, k, v (B, L, D) -> (B, L, D)
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       PositionalSchemeImpl* scheme, const Positions& pos, LayerCache* cache = nullptr);

  /// When set, the next forward keeps its attention probabilities (B, H, Lq, Lk) in last_weights()
  /// and takes the explicit path.
  void keep_weights(bool keep) { keep_weights_ = keep; }
  bool keeps_weights() const { return keep_weights_; }
  const torch::Tensor& last_weights() const { return last_weights_; }
  /// What that forward multiplied each query's logits by (1|B, H|1, Lq|1, 1): Scalable-Softmax, LogN scaling,
  /// the head scale and the logit scale together (length_factor); undefined where none of them is on.
  const torch::Tensor& last_logit_factor() const { return last_factor_; }

  /// Forces the explicit path even where fused attention is available (for tests and benchmarks).
  void force_explicit(bool on) { force_explicit_ = on; }
  bool explicit_forced() const { return force_explicit_; }

 private:
  torch::Tensor split_heads(const torch::Tensor& x) const;  // (B, L, D) -> (B, H, L, Dh)
  /// x (..., C) / rms(x over its last C channels) * gain (C), computed in float32 at least and returned in x's
  /// dtype: C = Dh per head, or D over the whole width.
  static torch::Tensor rms_normalized(const torch::Tensor& x, const torch::Tensor& gain);
  /// What the logits of each query are multiplied by (1|B, H|1, Lq|1, 1):
  /// Scalable-Softmax's s_h log n times LogN scaling's max(1, log n / log N)
  /// times the head scale's lambda_h times the fixed logit scale t, n the keys a query sees under mask
  /// (1|B, 1, Lq|1, Lk, 0 or -inf; undefined: all of k's (B, H, Lk, Dh) keys);
  /// undefined when all are off.
  torch::Tensor length_factor(const torch::Tensor& mask, const torch::Tensor& k) const;
  /// |query slot - key slot| (Lq, Lk) int64, the queries being the last Lq of Lk tokens.
  static torch::Tensor token_distance(int64_t Lq, int64_t Lk, const torch::Device& device);
  /// Stick-breaking weights (B, H, Lq, Lk) from the logits z (B, H, Lq, Lk), before the mask: going back
  /// from query i, key j < i takes sigmoid(z_ij) times what the keys between them left, prod (1 - sigmoid(z_ik));
  /// the query's own key takes the rest, so each row sums to 1. blocked (1|B, 1, Lq, Lk): the keys the
  /// mask hides (right of the query, padding); own (Lq, Lk): each query's own key.
  static torch::Tensor stick_breaking_weights(const torch::Tensor& z, const torch::Tensor& blocked,
                                              const torch::Tensor& own);

  int64_t d_model_, heads_, head_dim_;
  double dropout_;
  bool causal_;
  bool stick_breaking_;
  int64_t window_;
  bool keep_weights_ = false;
  bool force_explicit_ = false;
  torch::Tensor last_weights_;
  torch::Tensor last_factor_;      ///< the logit factor of the forward that kept last_weights_
  torch::Tensor length_scale_;     ///< (H) s_h of Scalable-Softmax; undefined when it is off
  int64_t logn_from_ = 0;          ///< N of LogN scaling; 0 when it is off
  int64_t temperature_from_ = 0;   ///< F of Llama 4's temperature; 0 when it is off
  double temperature_beta_ = 0.0;  ///< its beta
  double logit_scale_ = 1.0;       ///< the fixed factor of every logit; 1 when it is off
  torch::Tensor head_scale_;       ///< (H) lambda_h of the head scale; undefined when it is off
  torch::Tensor q_gain_, k_gain_;  ///< (Dh), or (D) over the whole width: QK-norm's gains; undefined when it is off
  bool qk_norm_whole_width_ = false;
  torch::nn::Linear qkv_{nullptr}, out_{nullptr};
  torch::nn::Dropout attn_drop_{nullptr};
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace posenc
