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

/// An additive bias over the offsets k - q, symmetric in them unless the shared
/// `directional` option is on: alibi, kerple, sandwich and fire
/// (extrapolation_bias.cpp), ape and decay (bias.cpp). A scheme gives its
/// symmetric bias; this class adds the direction, computes the sum once per
/// forward (the layers that share the instance reuse it) and answers what every
/// such bias answers.
class OffsetBiasImpl : public PositionalSchemeImpl {
 public:
  using PositionalSchemeImpl::PositionalSchemeImpl;
  Capabilities capabilities() const override { return Capabilities::additive_bias(); }
  bool directional() const override { return directional_; }
  /// symmetric_bias plus, when directional, the offsets by the sign of k - q: (1 or B, H, Lq, Lk).
  torch::Tensor bias(const Positions& pos) final;

 protected:
  /// Reads `directional`; when on, registers `left_offset` and `right_offset`
  /// (H), zero at start: learned per-head offsets for keys left (j < i) and
  /// right (j > i) of the query, so that the model can tell a sequence from its
  /// reverse. A scheme calls it last in its constructor, which keeps the order
  /// of parameters that checkpoints (and their optimizer state) follow.
  void register_direction(int64_t heads, const SchemeOptions& o);
  /// The bias over rel = bias_offsets(pos) ((Lq, Lk), or (B, Lq, Lk) over a
  /// task's ids): (H or 1, Lq, Lk) or (B, H, Lq, Lk), a function of |rel| (and,
  /// for fire past its threshold, of the query's position).
  virtual torch::Tensor symmetric_bias(const Positions& pos, const torch::Tensor& rel) = 0;

 private:
  bool directional_ = false;
  torch::Tensor left_, right_;  // (H)
};

}  // namespace posenc
