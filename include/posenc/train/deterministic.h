// train.deterministic: LibTorch's deterministic kernels for one training run.
//
// On the CPU posenc's training is deterministic already. On CUDA some kernels
// add partial results with atomics in whatever order the GPU runs them (SDPA's
// memory-efficient backward among them), so two runs of one config differ in
// the last bits, and AdamW makes that visible within a few steps. LibTorch's
// deterministic mode picks an ordered kernel where there is one and makes an
// operation without one an error that names it.
#pragma once

#include <c10/core/Device.h>

namespace posenc {

/// Turns LibTorch's deterministic mode on for its lifetime and restores the
/// previous mode after (tests train several runs in one process). On CUDA it
/// also sets CUBLAS_WORKSPACE_CONFIG=:4096:8, which cuBLAS needs to be
/// deterministic and LibTorch checks for, unless the environment already
/// names a value; it must come before the process's first matrix product on the GPU.
class DeterministicKernels {
 public:
  explicit DeterministicKernels(const c10::Device& device);
  ~DeterministicKernels();
  DeterministicKernels(const DeterministicKernels&) = delete;
  DeterministicKernels& operator=(const DeterministicKernels&) = delete;

 private:
  bool was_on_, was_warn_only_;
};

}  // namespace posenc
