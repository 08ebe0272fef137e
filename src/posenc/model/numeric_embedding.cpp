#include "posenc/model/numeric_embedding.h"

#include <cmath>

namespace posenc {

NumericEmbeddingImpl::NumericEmbeddingImpl(int64_t vocab_size, int64_t d_model)
    : vocab_size_(vocab_size), d_model_(d_model) {
  TORCH_CHECK(d_model % 2 == 0 && d_model >= 2, "numeric token embedding needs an even d_model, got ", d_model);
  const int64_t K = d_model / 2;
  // w_k = (2V)^(-k / (K - 1)): from 1 rad per unit down to 1/(2V) rad per unit.
  auto k = torch::arange(K, torch::kFloat64);
  auto w = K > 1 ? torch::pow(2.0 * static_cast<double>(vocab_size), -k / static_cast<double>(K - 1))
                 : torch::ones({1}, torch::kFloat64);
  frequencies_ = register_buffer("frequencies", w.to(torch::kFloat32));
  project_ = register_module("project", torch::nn::Linear(d_model, d_model));
  special_ = register_module("special", torch::nn::Embedding(2, d_model));
}

torch::Tensor NumericEmbeddingImpl::features(const torch::Tensor& values) const {
  // Angles in float64: v w_k reaches 10^5 rad for large vocabularies, where float32 loses the phase.
  auto angles = values.to(torch::kFloat64).unsqueeze(-1) * frequencies_.to(torch::kFloat64);  // (N, K)
  auto f = torch::stack({angles.sin(), angles.cos()}, /*dim=*/-1);                            // (N, K, 2)
  return f.flatten(-2).to(frequencies_.dtype());                                              // (N, D): sin, cos pairs
}

torch::Tensor NumericEmbeddingImpl::forward(const torch::Tensor& tokens) {
  const auto special = tokens.eq(0).logical_or(tokens.gt(vocab_size_));                    // (B, L)
  auto values = features(tokens.clamp(1, vocab_size_).reshape({-1}));                      // (B*L, D)
  auto x = project_->forward(values).reshape({tokens.size(0), tokens.size(1), d_model_});  // (B, L, D)
  auto rows = special_->forward(tokens.gt(vocab_size_).to(torch::kLong));  // (B, L, D): 0 pad, 1 CLS/SEP
  return torch::where(special.unsqueeze(-1), rows, x);
}

}  // namespace posenc
