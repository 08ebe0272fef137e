#include "posenc/train/deterministic.h"

#include <cstdlib>

#include <ATen/Context.h>

namespace posenc {

DeterministicKernels::DeterministicKernels(const c10::Device& device)
    : was_on_(at::globalContext().deterministicAlgorithms()),
      was_warn_only_(at::globalContext().deterministicAlgorithmsWarnOnly()) {
  // cuBLAS's own reduction order depends on its workspace: one fixed
  // configuration per handle (NVIDIA's cuBLAS documentation, "Results
  // reproducibility"). A value the user set is kept (LibTorch also accepts :16:8).
  if (device.is_cuda()) ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

DeterministicKernels::~DeterministicKernels() {
  at::globalContext().setDeterministicAlgorithms(was_on_, was_warn_only_);
}

}  // namespace posenc
