// AdamW with one pass over memory per parameter on the CPU.
//
// torch::optim::AdamW updates a parameter with about ten ATen ops (decay,
// two moment updates, sqrt, divide, add eps, addcdiv), each a full pass over
// the parameter, its gradient or its moments, each with dispatch overhead:
// 1 ms per step for the default model's 40 small tensors, 14 ms for the
// 6.3 M parameters at width 512 (posenc bench). FusedAdamW computes the same
// update, element by element in one loop, with the same state (step,
// exp_avg, exp_avg_sq), so checkpoints written by either load in the other.
// On CUDA (LibTorch 2.4+) step() runs ATen's multi-tensor fused AdamW kernel:
// one launch per parameter group instead of about ten per tensor (2.8 ms of a
// 10.5 ms step for the width-512 model on an H100, 2026-11-24). Anything else
// (other dtypes, amsgrad, non-contiguous tensors, parameters at different
// step counts) goes to torch::optim::AdamW::step unchanged.
#pragma once

#include <optional>

#include <torch/optim/adamw.h>

namespace posenc {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;

  // The same update with the learning rate and the step number read from
  // device tensors, for a step that a CUDA graph captures
  // (train/cuda_graphs.h): nothing is read back or allocated on the host path,
  // so one captured update serves every later step. On CUDA with LibTorch 2.4+
  // it is ATen's multi-tensor fused AdamW kernel; elsewhere a few tensor ops per
  // parameter. The state (exp_avg, exp_avg_sq, the host step count) is the one
  // step() keeps, so the two can alternate and checkpoints do not change.

  /// Creates the moments (zeros, step 0) of every parameter that has a
  /// gradient and none yet: call it outside a capture.
  void prepare_device_steps();
  /// The step count of the parameters' state (0 before the first update).
  int64_t steps_taken() const;
  /// One update: `lr` and `t` (the number of this update, from 1) are 0-dim
  /// float32 tensors on the parameters' device. Leaves the host step counts
  /// alone: count_device_step() advances them once the update has run.
  void step_on_device(const torch::Tensor& lr, const torch::Tensor& t);
  void count_device_step();

 private:
  bool fusable() const;
  struct CudaStep {
    int64_t taken;  // the step count every parameter with a gradient shares
    torch::Device device;
  };
  /// Where step() can run the fused CUDA kernel (every parameter with a
  /// gradient a contiguous float32 tensor on one CUDA device, all at one step
  /// count, no amsgrad): that count and device; nullopt where it cannot.
  std::optional<CudaStep> fused_cuda_step() const;
  /// As torch::optim::AdamW counts: only the parameters that have a gradient.
  void count_steps_of_params_with_grads();
  /// One update of every group with `t` (a 0-dim float32 tensor) as the step
  /// number and each group's lr, from `lr` when defined, else from its options.
  void update_on_device(const torch::Tensor& lr, const torch::Tensor& t);
};

}  // namespace posenc
