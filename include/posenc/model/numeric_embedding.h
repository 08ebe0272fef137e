// model.token_embedding = "numeric": a token's value v in 1..V embedded through
// fixed features of v and a learned projection, instead of one table row per
// value. The features are sinusoids of the value at geometric scales, as
// sinusoidal positions embed a position:
//
//   f(v) = [sin(v w_0), cos(v w_0), ..., sin(v w_{K-1}), cos(v w_{K-1})],
//   w_k = (2V)^(-k / (K - 1)),  K = d_model / 2,
//
// so the fastest pair turns by one radian per unit of value (neighbours are told
// apart) and the slowest turns less than half a circle over 1..V (no value
// aliases another). embedding(v) = W f(v) + b, a Linear(d_model, d_model).
// Padding (0) and CLS/SEP (V + 1) are not values: they keep a table row each.
//
// What it changes: a vocabulary of 10^5 values costs d_model^2 parameters, not
// 10^5 rows, and every value's embedding is trained by its neighbours', so values
// never seen in training (or rarely) are still placed between them; "v < w" is a
// smooth function of the features. What it does not change: the positional
// scheme, the attention, the pooling and the classifier.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace posenc {

class NumericEmbeddingImpl : public torch::nn::Module {
 public:
  /// Values 1..vocab_size; d_model even.
  NumericEmbeddingImpl(int64_t vocab_size, int64_t d_model);
  /// tokens (B, L) int64 in 0..vocab_size + 1 -> (B, L, d_model)
  torch::Tensor forward(const torch::Tensor& tokens);
  /// The fixed features of values (N) int64 -> (N, d_model), before the projection.
  torch::Tensor features(const torch::Tensor& values) const;

 private:
  int64_t vocab_size_, d_model_;
  torch::Tensor frequencies_;  // (d_model / 2) buffer, w_k
  torch::nn::Linear project_{nullptr};
  torch::nn::Embedding special_{nullptr};  // rows: padding, CLS/SEP
};
TORCH_MODULE(NumericEmbedding);

}  // namespace posenc
