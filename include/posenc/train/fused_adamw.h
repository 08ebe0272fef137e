// AdamW with one pass over memory per parameter on the CPU.
//
// torch::optim::AdamW updates a parameter with about ten ATen ops (decay,
// two moment updates, sqrt, divide, add eps, addcdiv), each a full pass over
// the parameter, its gradient or its moments, each with dispatch overhead:
// 1 ms per step for the default model's 40 small tensors, 14 ms for the
// 6.3 M parameters at width 512 (posenc bench). FusedAdamW computes the same
// update, element by element in one loop, with the same state (step,
// exp_avg, exp_avg_sq), so checkpoints written by either load in the other.
// Anything else (CUDA, other dtypes, amsgrad, non-contiguous tensors) goes to
// torch::optim::AdamW::step unchanged.
#pragma once

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
};

}  // namespace posenc
