// Gradient-norm clipping that stays on the device.
//
// torch::nn::utils::clip_grad_norm_ returns the norm as a double, so it reads
// it back to the host every step: on CUDA that stalls the step loop until the
// GPU has caught up. This is the same rule as PyTorch's Python version
// (grads *= min(1, max_norm / (norm + 1e-6))), with the norm left on the device.
#pragma once

#include <vector>

#include <torch/types.h>

namespace posenc {

/// Scales the gradients of `params` in place so that their global L2 norm is
/// at most `max_norm`; returns that norm before scaling, a 0-dim tensor on the
/// gradients' device (on a GPU without a host synchronisation). Parameters
/// without a gradient are skipped; with none at all the result is a CPU zero.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

/// The global L2 norm of the gradients of `params`, as clip_grad_norm computes
/// it, without scaling anything (a 0-dim tensor on the gradients' device).
torch::Tensor grad_norm(const std::vector<torch::Tensor>& params);

}  // namespace posenc
