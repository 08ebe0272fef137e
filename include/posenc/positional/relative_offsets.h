// Helpers for schemes that depend on the offset between query and key positions.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "posenc/positional/registry.h"
#include "posenc/positional/scheme.h"

namespace posenc {

/// rel[i, j] = k_pos[j] - q_pos[i]: (Lq, Lk) int64 ("memory minus query", as in T5 and Shaw);
/// per row, (B, Lq, Lk), from ids of (B, Lq) and (B, Lk).
torch::Tensor relative_positions(const torch::Tensor& q_pos, const torch::Tensor& k_pos);

/// |rel[i, j]| = |k_pos[j] - q_pos[i]| as `dtype`: (Lq, Lk).
torch::Tensor absolute_distances(const torch::Tensor& q_pos, const torch::Tensor& k_pos, torch::ScalarType dtype);

/// The offsets a bias reads: k - q over the model's count 0..L-1, (Lq, Lk), or
/// over the ids a task defines where Positions carries them, (B, Lq, Lk).
torch::Tensor bias_offsets(const Positions& pos);

/// The query positions a bias reads, beside bias_offsets: (Lq, 1) or (B, Lq, 1).
torch::Tensor bias_query_positions(const Positions& pos);

/// A bias of (H, Lq, Lk) as (1, H, Lq, Lk); one of (B, H, Lq, Lk) as it is.
torch::Tensor with_batch_dim(const torch::Tensor& bias);

/// KERPLE's kernels (Chi et al. 2022) over `distance` (1, Lq, Lk) or (B, 1, Lq, Lk):
/// -r1·log(1 + r2·d), or with `power` -r1·d^min(r2, 2); r1, r2 (H) are clamped
/// from below at min_r1, min_r2 in the forward pass. Returns (H, Lq, Lk) or
/// (B, H, Lq, Lk). KERPLE and DAPE share it.
torch::Tensor kerple_kernel(const torch::Tensor& r1, const torch::Tensor& r2, double min_r1, double min_r2,
                            const torch::Tensor& distance, bool power);

/// ALiBi slopes for n heads (Press et al.): 2^(-8(h+1)/n) when n is a power of two;
/// otherwise the slopes of the closest lower power of two P, then every other
/// slope of 2P until there are n.
std::vector<double> alibi_slopes(int64_t heads);

/// T5 relative-position bucket of each offset (memory - query), bidirectional or causal:
/// exact buckets for |offset| < num_buckets/4 (bidirectional) and log-spaced ones up to max_distance.
torch::Tensor t5_buckets(const torch::Tensor& relative, int64_t num_buckets, int64_t max_distance, bool bidirectional);

/// The `directional` option that every symmetric bias (a function of |i-j|
/// only) offers, declared once so that each scheme lists it alike.
OptionSpec directional_option();

/// What `directional: true` adds to a symmetric bias: learned per-head offsets
/// for keys left (j < i) and right (j > i) of the query, zero at start, so the
/// model can tell a sequence from its reverse. Parameters `left_offset` and
/// `right_offset` (H) are registered on the owning scheme when enabled.
class DirectionalOffsets {
 public:
  DirectionalOffsets(torch::nn::Module& owner, int64_t heads, bool enabled);
  bool enabled() const { return enabled_; }
  /// bias (1 or B, H or 1, Lq, Lk) plus the offsets by the sign of rel ((Lq, Lk) or
  /// (B, Lq, Lk)): (1 or B, H, Lq, Lk); the bias unchanged when disabled.
  torch::Tensor apply(const torch::Tensor& bias, const torch::Tensor& rel) const;

 private:
  bool enabled_;
  torch::Tensor left_, right_;  // (H)
};

}  // namespace posenc
