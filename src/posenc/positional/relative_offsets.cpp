#include "posenc/positional/relative_offsets.h"

#include <cmath>

namespace posenc {

torch::Tensor relative_positions(const torch::Tensor& q_pos, const torch::Tensor& k_pos) {
  return k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1);  // (Lq, Lk), or (B, Lq, Lk) from (B, L) ids
}

torch::Tensor absolute_distances(const torch::Tensor& q_pos, const torch::Tensor& k_pos, torch::ScalarType dtype) {
  return relative_positions(q_pos, k_pos).abs().to(dtype);  // (Lq, Lk)
}

torch::Tensor bias_offsets(const Positions& pos) {
  return pos.task_q.defined() ? relative_positions(pos.task_q, pos.task_k)  // (B, Lq, Lk)
                              : relative_positions(pos.q, pos.k);           // (Lq, Lk)
}

torch::Tensor bias_query_positions(const Positions& pos) {
  return (pos.task_q.defined() ? pos.task_q : pos.q).unsqueeze(-1);  // (Lq, 1) or (B, Lq, 1)
}

torch::Tensor with_batch_dim(const torch::Tensor& bias) { return bias.dim() == 3 ? bias.unsqueeze(0) : bias; }

torch::Tensor kerple_kernel(const torch::Tensor& r1, const torch::Tensor& r2, double min_r1, double min_r2,
                            const torch::Tensor& distance, bool power) {
  auto a = r1.clamp_min(min_r1).view({-1, 1, 1});  // (H, 1, 1)
  auto b = r2.clamp_min(min_r2).view({-1, 1, 1});
  return power ? -a * distance.pow(b.clamp_max(2.0))
               : -a * torch::log1p(b * distance);  // (H, Lq, Lk) or (B, H, Lq, Lk)
}

std::vector<double> alibi_slopes(int64_t heads) {
  auto power_of_two = [](int64_t n) {
    std::vector<double> s;
    for (int64_t h = 0; h < n; ++h) s.push_back(std::pow(2.0, -8.0 * (h + 1) / n));
    return s;
  };
  int64_t p = 1;
  while (p * 2 <= heads) p *= 2;
  std::vector<double> slopes = power_of_two(p);
  if (p == heads) return slopes;
  const auto extra = power_of_two(2 * p);
  for (size_t i = 0; static_cast<int64_t>(slopes.size()) < heads; i += 2) slopes.push_back(extra[i]);
  return slopes;
}

torch::Tensor t5_buckets(const torch::Tensor& relative, int64_t num_buckets, int64_t max_distance, bool bidirectional) {
  auto buckets = torch::zeros_like(relative);
  torch::Tensor distance;
  if (bidirectional) {
    num_buckets /= 2;
    buckets = buckets + (relative > 0).to(torch::kLong) * num_buckets;  // keys to the right: upper half
    distance = relative.abs();
  } else {
    distance = (-relative).clamp_min(0);
  }
  const int64_t max_exact = num_buckets / 2;
  // Clamp before the log: the log-spaced branch is only taken for distance >= max_exact.
  auto scaled = torch::log(distance.clamp_min(max_exact).to(torch::kFloat64) / max_exact) /
                std::log(static_cast<double>(max_distance) / max_exact) * (num_buckets - max_exact);
  auto large = (max_exact + scaled.to(torch::kLong)).clamp_max(num_buckets - 1);
  return buckets + torch::where(distance < max_exact, distance, large);
}

OptionSpec directional_option() {
  return {"directional",
          OptionKind::Bool,
          false,
          "add learned per-head offsets for keys left/right of the query so the model can tell direction",
          -1e300,
          1e300,
          {},
          false};
}

void OffsetBiasImpl::register_direction(int64_t heads, const SchemeOptions& o) {
  directional_ = o.get_bool("directional");
  if (!directional_) return;
  left_ = register_parameter("left_offset", torch::zeros({heads}));
  right_ = register_parameter("right_offset", torch::zeros({heads}));
}

torch::Tensor OffsetBiasImpl::bias(const Positions& pos) {
  return once_per_forward(pos, "offset_bias", [&] {
    const auto rel = bias_offsets(pos);                               // (Lq, Lk) or (B, Lq, Lk)
    const auto symmetric = with_batch_dim(symmetric_bias(pos, rel));  // (1 or B, H or 1, Lq, Lk)
    if (!directional_) return symmetric;
    const auto dtype = left_.scalar_type();
    auto right = (rel > 0).to(dtype).unsqueeze(-3),
         left = (rel < 0).to(dtype).unsqueeze(-3);                                   // (1, Lq, Lk) or (B, 1, Lq, Lk)
    auto offsets = right_.view({-1, 1, 1}) * right + left_.view({-1, 1, 1}) * left;  // (H, Lq, Lk) or (B, H, Lq, Lk)
    return symmetric + with_batch_dim(offsets);                                      // (1 or B, H, Lq, Lk)
  });
}

}  // namespace posenc
