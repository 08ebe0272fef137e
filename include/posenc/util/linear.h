// y = x W^T + b through ATen's fused linear (addmm on the flattened batch).
//
// LibTorch 1.13's torch::nn::Linear::forward goes through the C++ frontend's
// functional linear, which for inputs of more than two dims runs matmul and
// then a separate in-place bias add: two ops forward and more backward. Here
// that cost 10-15% of a training step at width 512 (posenc bench) compared
// with the same model in PyTorch eager, whose F.linear calls at::linear.
#pragma once

#include <torch/torch.h>

namespace posenc {

inline torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias.defined() ? c10::optional<torch::Tensor>(layer->bias) : c10::nullopt);
}

}  // namespace posenc
