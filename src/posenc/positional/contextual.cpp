// CoPE, contextual position encoding (Golovneva et al. 2024).
//
// A query decides which keys count: gate g_ij = sigmoid(q_i·k_j / sqrt(Dh)), and the
// position of key j seen from query i is the sum of the gates between them. The paper
// is causal and counts back from the query, p_ij = sum_{t=j..i} g_it. An encoder also
// sees keys to its right; here they count forward with a negative sign, so one signed
// position covers both directions and the scheme stays directional:
//
//   p_ij =  sum_{t=j..i}   g_it   for j <= i   (in (0, i-j+1])
//   p_ij = -sum_{t=i+1..j} g_it   for j >  i   (in [-(j-i), 0))
//
// With the prefix sums C_ij = sum_{t<=j} g_it both are C_ii - C_ij (+ g_ij where j <= i),
// one cumsum. Under a causal mask the keys j <= i never read a gate to the right of i,
// so the same code is the paper's causal CoPE there.
//
// Positions are clamped to [-(N-1), N-1] and are fractional: the score term is the
// linear interpolation of q·e[floor(p)] and q·e[ceil(p)] over a table e of 2N-1 rows
// shared by the heads (the paper computes q·e for every integer position once, then
// gathers). The paper adds q·e to the scaled logits; here it is added before the
// 1/sqrt(Dh) scale like every score term, which rescales e by sqrt(Dh) and nothing else.
//
// The ids in Positions are not used at all: positions come from the content.
#include <cmath>

#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"

namespace posenc {
namespace {

class CopeImpl : public PositionalSchemeImpl {
 public:
  CopeImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("cope"),
        max_count_(o.get_int("max_count")),
        scale_(1.0 / std::sqrt(double(ctx.head_dim))) {
    // Row r holds the embedding of position r - (N-1).
    table_ = register_parameter("table", torch::randn({2 * max_count_ - 1, ctx.head_dim}) * o.get_float("init_std"));
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.score_terms = true;
    return c;
  }
  bool supports_kv_cache() const override { return false; }  // counts read the square score matrix
  bool directional() const override { return true; }
  bool offset_only() const override { return false; }
  double attention_flops(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t Dh) const override {
    return 2.0 * B * H * Lq * (2 * max_count_ - 1) * Dh  // q·e for every integer position
           + 12.0 * B * H * Lq * Lk;                     // gates, cumsum, positions, two gathers, interpolation
  }

  torch::Tensor score_terms(const torch::Tensor& q, const torch::Tensor& /*k*/, const torch::Tensor& qk,
                            const Positions& pos) override {
    TORCH_CHECK(qk.size(-1) == qk.size(-2),
                "cope counts between a query and the keys of its own sequence: "
                "self-attention only, got scores ",
                qk.sizes());
    const int64_t N = max_count_;
    auto at_or_left = once_per_forward(
        pos, "at_or_left",
        [&] {  // (L, L): j <= i
          return torch::ones({qk.size(-1), qk.size(-1)}, qk.options().dtype(torch::kBool)).tril();
        },
        qk);
    auto p = contextual_positions(qk, at_or_left).clamp(-(N - 1), N - 1);  // (B, H, Lq, Lk) float32
    auto lower = p.floor();
    auto weight = (p - lower).to(q.scalar_type());    // (B, H, Lq, Lk), grad flows to the gates
    auto below = (lower + (N - 1)).to(torch::kLong);  // table rows of floor(p) and ceil(p)
    auto above = (below + 1).clamp_max(2 * N - 2);
    auto per_position = torch::matmul(q, table_.to(q.scalar_type()).t());  // (B, H, Lq, 2N-1)
    return per_position.gather(-1, below) * (1 - weight) + per_position.gather(-1, above) * weight;
  }

  /// Signed contextual positions (B, H, Lq, Lk), float32 whatever qk's dtype (a bf16
  /// cumsum over hundreds of gates would lose whole counts).
  torch::Tensor contextual_positions(const torch::Tensor& qk, const torch::Tensor& at_or_left) const {
    auto gates = torch::sigmoid(qk.to(torch::kFloat32) * scale_);  // (B, H, Lq, Lk)
    auto prefix = gates.cumsum(-1);                                // C_ij = sum_{t<=j} g_it
    auto own = prefix.diagonal(0, -2, -1).unsqueeze(-1);           // (B, H, L, 1): C_ii
    return own - prefix + gates * at_or_left;
  }

 private:
  int64_t max_count_;
  double scale_;
  torch::Tensor table_;
};

}  // namespace

SchemeInfo cope_scheme_info() {
  return {"cope",
          "contextual positions: gates sigmoid(q·k) summed between query and key (counting back to the left, "
          "forward with a minus sign to the right), interpolated embeddings q·e[p] added to the scores "
          "(Golovneva et al. 2024)",
          {{"max_count", OptionKind::Int, 64,
            "positions are clamped to [-(N-1), N-1]; the table has 2N-1 rows (the paper's npos_max)", 2, 1 << 16},
           {"init_std", OptionKind::Float, 0.02,
            "standard deviation of the initial position embeddings (the paper starts at 0, where the gates get "
            "no gradient on the first step)",
            0.0, 10.0}},
          Placement::EveryLayer,
          construct<CopeImpl>};
}

}  // namespace posenc
