// model.kind=encoder: the classifier. tokens (B, L) -> logits (B, 2) through
// bidirectional blocks and model.pooling (a CLS token in front, the max, the
// mean, or a learned-temperature log-sum-exp over positions).
#pragma once

#include <utility>

#include "posenc/model/transformer.h"

namespace posenc {

class EncoderImpl : public TransformerImpl {
 public:
  EncoderImpl(const ModelConfig& cfg, int64_t vocab_size);

  /// tokens (B, L) int64 -> logits (B, 2). Position ids default to 0..L-1
  /// (0..L with the CLS token in front); `ids`, when given, replaces them: L
  /// (plus CLS) sorted int64 ids on the CPU (randomized positions in training).
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& ids = {});

  /// One forward: the pooled logits (B, 2), as forward() gives them, and the
  /// classifier applied to each position's output instead of the pooled one,
  /// (B, L, 2) (max, mean and lse pooling). Where a position of a sorted
  /// sequence alone says "not sorted", it would raise a false alarm.
  std::pair<torch::Tensor, torch::Tensor> classify_positions(const torch::Tensor& tokens);

  int64_t model_length(int64_t tokens) const override { return tokens + (cfg_.pooling == Pooling::Cls ? 1 : 0); }
  double forward_flops(int64_t batch, int64_t length) const override;

 private:
  /// x (B, L, D) -> (B, D) by model.pooling.
  torch::Tensor pool(const torch::Tensor& x) const;
  torch::Tensor log_temperature_;  // lse pooling: (D), tau = exp(.)
};
TORCH_MODULE(Encoder);

/// The model as the classifier; throws naming `what` needs one for the other kinds.
EncoderImpl& classifier_of(Transformer& model, const std::string& what);

}  // namespace posenc
