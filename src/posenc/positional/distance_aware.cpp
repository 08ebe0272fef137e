// DA-Transformer (Wu, Wu, Huang 2021): distance-aware rescaling of the scores.
//   R_ij = w_h |i-j|, f(x) = (1 + exp(v_h)) / (1 + exp(v_h - x)), so f(0) = 1,
//   scores <- ReLU(scores) * f(R) before the softmax. Multiplicative, not additive;
//   ReLU(s/sqrt(d)) * f = ReLU(s) * f / sqrt(d), so it applies to the scaled scores.
#include "posenc/positional/relative_offsets.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"

namespace posenc {
namespace {

class DaImpl : public PositionalSchemeImpl {
 public:
  DaImpl(const SchemeContext& ctx, const SchemeOptions& o) : PositionalSchemeImpl("da") {
    // Heads start with different distance preferences, from local (w < 0) to global (w > 0).
    const double spread = o.get_float("init_spread");
    auto w = ctx.heads > 1 ? torch::linspace(-spread, spread, ctx.heads) : torch::zeros({1});
    w_ = register_parameter("w", w);                          // (H)
    v_ = register_parameter("v", torch::zeros({ctx.heads}));  // (H): sharpness of f
  }
  Capabilities capabilities() const override { return Capabilities::score_reweighting(); }
  bool directional() const override { return false; }

  torch::Tensor reweight(const torch::Tensor& scores, const Positions& pos) override {
    auto f = once_per_forward(pos, "f", [&] { return rescale(pos); });  // (1, H, Lq, Lk)
    return torch::relu(scores) * f;
  }

  /// f(w_h |i-j|): (1, H, Lq, Lk), equal to 1 where i == j.
  torch::Tensor rescale(const Positions& pos) const {
    auto distance = absolute_distances(pos.q, pos.k, w_.scalar_type()).unsqueeze(0);  // (1, Lq, Lk)
    auto x = w_.view({-1, 1, 1}) * distance;                                          // (H, Lq, Lk)
    auto v = v_.view({-1, 1, 1});
    return ((1.0 + v.exp()) / (1.0 + (v - x).exp())).unsqueeze(0);
  }

 private:
  torch::Tensor w_, v_;
};

}  // namespace

SchemeInfo da_scheme_info() {
  return {"da",
          "DA-Transformer: ReLU(scores) * f(w_h|i-j|), f a learnable sigmoid with f(0) = 1 (Wu et al. 2021)",
          {{"init_spread", OptionKind::Float, 0.5, "initial w_h spread evenly over [-spread, spread] across heads", 0.0,
            100.0}},
          Placement::EveryLayer,
          [](const SchemeContext& c, const SchemeOptions& o) -> PositionalScheme {
            return std::make_shared<DaImpl>(c, o);
          }};
}

}  // namespace posenc
