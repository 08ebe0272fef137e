// Helpers for schemes that depend on the offset between query and key positions.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace posenc {

/// rel[i, j] = k_pos[j] - q_pos[i]: (Lq, Lk) int64 ("memory minus query", as in T5 and Shaw).
torch::Tensor relative_positions(const torch::Tensor& q_pos, const torch::Tensor& k_pos);

/// |rel[i, j]| = |k_pos[j] - q_pos[i]| as `dtype`: (Lq, Lk).
torch::Tensor absolute_distances(const torch::Tensor& q_pos, const torch::Tensor& k_pos, torch::ScalarType dtype);

/// ALiBi slopes for n heads (Press et al.): 2^(-8(h+1)/n) when n is a power of two;
/// otherwise the slopes of the closest lower power of two P, then every other
/// slope of 2P until there are n.
std::vector<double> alibi_slopes(int64_t heads);

/// T5 relative-position bucket of each offset (memory - query), bidirectional or causal:
/// exact buckets for |offset| < num_buckets/4 (bidirectional) and log-spaced ones up to max_distance.
torch::Tensor t5_buckets(const torch::Tensor& relative, int64_t num_buckets, int64_t max_distance, bool bidirectional);

}  // namespace posenc
