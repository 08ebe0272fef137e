// The one place where LibTorch 1.13 (Debian 12) and 2.x (Debian 13's 2.6, the
// CUDA builds inside Python's torch package) differ for posenc. Every other
// file calls these and has no TORCH_VERSION test of its own.
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <type_traits>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#if defined(POSENC_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

// c10d (train/data_parallel.cpp): from 2.0 on, ProcessGroupGloo and
// ProcessGroupNCCL derive from c10d::Backend (1.13: from c10d::ProcessGroup);
// both bases have the allreduce/broadcast/barrier that posenc calls. From 2.2
// on, TCPStoreOptions has useLibUV, which must be false where LibTorch was
// built without libuv (Debian's 2.6).
#if TORCH_VERSION_MAJOR >= 2
#define POSENC_C10D_BACKEND_BASE c10d::Backend
#else
#define POSENC_C10D_BACKEND_BASE c10d::ProcessGroup
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define POSENC_TCPSTORE_HAS_USE_LIBUV 1
#else
#define POSENC_TCPSTORE_HAS_USE_LIBUV 0
#endif

namespace posenc::compat {

constexpr int kTorchMajor = TORCH_VERSION_MAJOR;
constexpr int kTorchMinor = TORCH_VERSION_MINOR;

// at::scaled_dot_product_attention exists from 2.0 on.
#if TORCH_VERSION_MAJOR >= 2
#define POSENC_HAS_SDPA 1
#else
#define POSENC_HAS_SDPA 0
#endif
constexpr bool kHasSdpa = POSENC_HAS_SDPA != 0;

/// Fused attention (2.x): softmax(q·kᵀ/sqrt(Dh) + mask)·v. `mask` is an additive
/// float mask in q's dtype or undefined. Throws on 1.13, where callers never get here.
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const at::Tensor& mask, double dropout) {
#if POSENC_HAS_SDPA
  c10::optional<at::Tensor> m;
  if (mask.defined()) m = mask;
  return at::scaled_dot_product_attention(q, k, v, m, dropout, /*is_causal=*/false);
#else
  (void)q, (void)k, (void)v, (void)mask, (void)dropout;
  TORCH_CHECK(false, "scaled_dot_product_attention needs LibTorch 2.x");
#endif
}

// Autocast: 2.4 replaced the per-backend calls (set_enabled, set_cpu_enabled,
// set_autocast_gpu_dtype, ...) by ones that take the device type, and
// deprecated the old ones.
inline bool autocast_enabled(at::DeviceType device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast(at::DeviceType device, bool on, at::ScalarType dtype = at::kBFloat16) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (on) at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, on);
#else
  if (device == at::kCUDA) {
    if (on) at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(on);
  } else {
    if (on) at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(on);
  }
#endif
  if (!on) at::autocast::clear_cache();
}

/// The key torch::optim keeps a parameter's state under: its TensorImpl
/// address, printed as a string in 1.x and the pointer itself in 2.x. Chosen by
/// the optimizer's own key type, so no version number has to be guessed.
template <class Key>
Key optimizer_state_key(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;  // what 1.x's c10::guts::to_string does for a pointer
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

/// AdamW over a list of CUDA tensors in one multi-tensor kernel, with the
/// learning rate and the step counts read from device tensors, so that a CUDA
/// graph can capture it (ATen's _fused_adamw_, tensor-lr overload, 2.4 on).
/// Returns false, having done nothing, where this build has no such kernel
/// (then the caller updates tensor by tensor).
#if defined(POSENC_WITH_CUDA) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
#define POSENC_HAS_FUSED_ADAMW_CUDA 1
#else
#define POSENC_HAS_FUSED_ADAMW_CUDA 0
#endif
constexpr bool kHasFusedAdamwCuda = POSENC_HAS_FUSED_ADAMW_CUDA != 0;

inline bool fused_adamw_on_device(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                                  at::TensorList exp_avg_sqs, at::TensorList steps, const at::Tensor& lr, double beta1,
                                  double beta2, double weight_decay, double eps) {
#if POSENC_HAS_FUSED_ADAMW_CUDA
  if (params.empty() || !params[0].is_cuda()) return false;
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2, weight_decay,
                    eps, /*amsgrad=*/false, /*maximize=*/false);
  return true;
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1, (void)beta2,
      (void)weight_decay, (void)eps;
  return false;
#endif
}

/// The CUDA caching allocator's peak of allocated bytes on one device, and its
/// reset. Only with -DPOSENC_CUDA=ON (it needs c10_cuda); else 0.
inline void reset_cuda_peak_memory(int device) {
#if defined(POSENC_WITH_CUDA)
  try {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device);
  } catch (const c10::Error&) {  // nothing allocated yet: no peak to reset
  }
#else
  (void)device;
#endif
}

inline double cuda_peak_allocated_bytes(int device) {
#if defined(POSENC_WITH_CUDA)
  // Index 0 is StatType::AGGREGATE in every release; the enum itself moved
  // namespaces in 2.x (c10::cuda::CUDACachingAllocator -> c10::CachingDeviceAllocator).
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    return static_cast<double>(stats.allocated_bytes[0].peak);
  } catch (const c10::Error&) {  // the allocator is set up at the first CUDA allocation
    return 0;
  }
#else
  (void)device;
  return 0;
#endif
}

/// Bytes a new allocation on CUDA device `device` can still get: the driver's
/// free memory plus what the caching allocator holds without using it. 0 (not
/// known) without -DPOSENC_CUDA=ON or when the query fails.
inline double cuda_free_memory_bytes(int device) {
#if defined(POSENC_WITH_CUDA)
  const c10::cuda::CUDAGuard on_device(static_cast<c10::DeviceIndex>(device));
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: a later CUDA call must not report this one
    return 0;
  }
  double cached_unused = 0;
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    cached_unused =
        static_cast<double>(stats.reserved_bytes[0].current) - static_cast<double>(stats.allocated_bytes[0].current);
  } catch (const c10::Error&) {
    // "Invalid device argument": the caching allocator is set up at a process's
    // first CUDA allocation, and a process that has made none (compare sizing
    // its --jobs) holds nothing cached.
  }
  return static_cast<double>(free) + std::max(0.0, cached_unused);
#else
  (void)device;
  return 0;
#endif
}

}  // namespace posenc::compat
