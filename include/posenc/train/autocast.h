// bf16 autocast of the forward pass (CUDA or CPU), on while the guard lives.
// Weights, gradients and the optimizer stay float32.
#pragma once

#include <torch/torch.h>

#include "posenc/compat.h"

namespace posenc {

class AutocastGuard {
 public:
  AutocastGuard(bool on, const torch::Device& device) : on_(on), device_(device.type()) {
    if (on_) compat::set_autocast(device_, true, at::kBFloat16);
  }
  ~AutocastGuard() {
    if (on_) compat::set_autocast(device_, false);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool on_;
  at::DeviceType device_;
};

}  // namespace posenc
