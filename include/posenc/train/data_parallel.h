// Data parallel training over c10d, LibTorch's process groups (what torchrun
// and PyTorch's DistributedDataParallel stand on): Gloo on the CPU, NCCL on
// CUDA. Rank 0 serves a TCP store for the rendezvous; its initial parameters
// are broadcast; each step's gradients are summed over ranks in flattened
// buckets (one all-reduce per bucket) and divided by the number of ranks.
// The stop request of any rank (SIGINT, SIGTERM, SIGHUP) travels in the last
// bucket, so every rank stops after the same step.
//
// A collective that fails (a rank died, or did not answer within the
// timeout) throws CollectiveError naming this rank and, with two ranks, the
// other one; no rank waits forever.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include "posenc/choices.h"
#include "posenc/util/launch.h"

namespace posenc {

/// A collective with the other ranks failed (exit status 1).
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// train.backend: auto -> gloo on the CPU, nccl on CUDA. A backend this
/// build lacks (NCCL in Debian's LibTorch, Gloo without libgloo-dev's headers)
/// or one that does not serve the device is a ConfigError saying what is missing.
CollectiveBackend resolve_backend(CollectiveBackend backend, c10::Device device);

/// Whether this build can use `backend` (gloo or nccl): Gloo needs LibTorch's
/// Gloo and libgloo-dev's headers (a pip LibTorch's build has none), NCCL a
/// CUDA LibTorch and nccl.h.
bool backend_built(CollectiveBackend backend);

class DataParallel {
 public:
  /// Joins the ranks of `launch` (blocks until all have joined, at most
  /// timeout_s). A MASTER_PORT in use on rank 0's machine is a ConfigError.
  DataParallel(const Launch& launch, CollectiveBackend backend, c10::Device device, double bucket_mb,
               int64_t timeout_s);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const;
  int world_size() const;
  const std::string& backend() const;

  /// Every rank's `tensors` take rank 0's values (parameters and buffers at the start).
  void broadcast_from_rank0(const std::vector<at::Tensor>& tensors);

  /// Replaces each parameter's gradient by its mean over the ranks (a
  /// parameter without a gradient on every rank keeps none). `stop_signal` is
  /// this rank's stop request (0 for none); returns the signal every rank
  /// stops with (0: go on).
  int average_gradients(const std::vector<at::Tensor>& parameters, int stop_signal);

  /// Element-wise sums over the ranks (log and validation tallies).
  std::vector<double> sum(const std::vector<double>& values);

  /// Seconds spent in gradient all-reduces (copies included) since the start.
  double allreduce_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace posenc
