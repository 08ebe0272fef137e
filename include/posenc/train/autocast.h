// bf16 autocast of the forward pass (CUDA or CPU), on while the guard lives.
// Weights, gradients and the optimizer stay float32.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace posenc {

class AutocastGuard {
 public:
  AutocastGuard(bool on, const torch::Device& device) : on_(on), cuda_(device.is_cuda()) {
    if (!on_) return;
    if (cuda_) {
      at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
      at::autocast::set_enabled(true);
    } else {
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      at::autocast::set_cpu_enabled(true);
    }
  }
  ~AutocastGuard() {
    if (!on_) return;
    if (cuda_) at::autocast::set_enabled(false);
    else at::autocast::set_cpu_enabled(false);
    at::autocast::clear_cache();
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool on_, cuda_;
};

}  // namespace posenc
