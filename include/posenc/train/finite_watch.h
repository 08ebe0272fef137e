// The first training step whose loss, and the first whose gradient norm, was
// not finite, kept on the device: a few tiny tensor ops per step and no host
// synchronisation. The trainer reads it where it syncs anyway (log lines,
// validations, checkpoints); finding one writes diverged.json into the run
// directory and throws Diverged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/transformer.h"

namespace posenc {

class FiniteWatch {
 public:
  /// `writes`: whether finding one writes diverged.json (only rank 0 of a
  /// data parallel run does; every rank throws).
  explicit FiniteWatch(torch::Device device, bool writes = true);

  /// Records step (0-based) if its loss or gradient norm is not finite; no sync.
  void observe(int64_t step, const torch::Tensor& loss, const torch::Tensor& grad_norm);
  /// The same with the step as a 0-dim int64 tensor on the device (a step that
  /// a CUDA graph captures reads its number from there).
  void observe(const torch::Tensor& step, const torch::Tensor& loss, const torch::Tensor& grad_norm);

  /// Reads the flags (a host sync); throws Diverged if anything went non-finite.
  void check(const std::filesystem::path& dir, const Config& cfg, int64_t last_checkpoint) const;

  /// A weight went non-finite with a finite loss and gradient norm (one no
  /// batch reaches, such as the padding row): checked before each checkpoint.
  void check_weights(Transformer& model, const std::filesystem::path& dir, const Config& cfg, int64_t last_checkpoint,
                     int64_t step) const;

 private:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  torch::Tensor first_bad_;  // (2) int64: loss, gradient norm
  bool writes_;
};

}  // namespace posenc
