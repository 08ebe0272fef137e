// Rotary position embedding (Su et al., RoFormer): q and k are rotated pairwise
// by p * theta_i, so q_m · k_n depends on m - n only. Values are not rotated.
#include "posenc/config.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/schemes.h"
#include "posenc/positional/tables.h"

namespace posenc {
namespace {

class RopeImpl : public PositionalSchemeImpl {
 public:
  RopeImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("rope"), base_(o.get_float("base")), interleaved_(o.get_string("layout") == "interleaved") {
    const double fraction = o.get_float("fraction");
    // Rotation acts on pairs: at fraction 1 an odd head dimension would leave
    // its last dimension unrotated while the config claims all are.
    if (fraction >= 1.0 && ctx.head_dim % 2 != 0)
      throw IncompatibleConfig("model.positional.type=rope rotates pairs of dimensions, but the head dimension is " +
                               std::to_string(ctx.head_dim) +
                               " (odd: model.d_model / model.heads); use an even head dimension, or "
                               "model.positional.fraction < 1 to leave dimensions unrotated on purpose");
    rot_dim_ = static_cast<int64_t>(fraction * ctx.head_dim) / 2 * 2;  // even number of rotated dims
    if (rot_dim_ < 2)
      throw ConfigError("model.positional.fraction=" + std::to_string(fraction) + " rotates " +
                        std::to_string(rot_dim_) + " of head_dim " + std::to_string(ctx.head_dim) +
                        " dims; rope needs at least 2");
  }
  Capabilities capabilities() const override { return Capabilities::rotation(); }
  bool directional() const override { return true; }

  void rotate(torch::Tensor& q, torch::Tensor& k, const Positions& pos) override {
    q = apply(q, pos.q, pos, "q");
    k = apply(k, pos.k, pos, "k");
  }

 private:
  /// x (B, H, L, Dh) rotated at the given positions (L).
  torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& positions, const Positions& pos, const char* which) {
    // cos/sin once per forward, shared by every layer using this instance.
    auto cs = once_per_forward(pos, which, [&] {
      auto angle = rotary_angles(positions, rot_dim_, base_);                      // (L, R/2) float64
      return torch::stack({angle.cos(), angle.sin()}).to(x.device(), x.scalar_type());  // (2, L, R/2)
    }, x);
    auto cos = cs[0], sin = cs[1];  // (L, R/2), broadcast over (B, H)
    auto rot = x.narrow(-1, 0, rot_dim_);
    torch::Tensor out;
    if (interleaved_) {
      auto pairs = rot.unflatten(-1, {rot_dim_ / 2, 2});     // (B, H, L, R/2, 2)
      auto even = pairs.select(-1, 0), odd = pairs.select(-1, 1);  // (B, H, L, R/2)
      out = torch::stack({even * cos - odd * sin, even * sin + odd * cos}, -1).flatten(-2);  // (B, H, L, R)
    } else {
      auto x1 = rot.narrow(-1, 0, rot_dim_ / 2), x2 = rot.narrow(-1, rot_dim_ / 2, rot_dim_ / 2);
      out = torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);  // (B, H, L, R)
    }
    if (rot_dim_ == x.size(-1)) return out;
    return torch::cat({out, x.narrow(-1, rot_dim_, x.size(-1) - rot_dim_)}, -1);  // pass-through dims
  }

  double base_;
  bool interleaved_;
  int64_t rot_dim_;
};

}  // namespace

SchemeInfo rope_scheme_info() {
  return {"rope",
          "rotary: q and k rotated pairwise by p*theta_i, theta_i = base^(-2i/Dh); q·k depends on m-n only (Su et al.)",
          {
              {"base", OptionKind::Float, 10000.0, "frequency base", 1.0, 1e12},
              {"layout", OptionKind::String, "half",
               "half: rotate (x[:R/2], x[R/2:]) as in HF/LLaMA; interleaved: rotate pairs (2i, 2i+1) as in the paper",
               0, 0, {"half", "interleaved"}},
              {"fraction", OptionKind::Float, 1.0, "fraction of each head's dims that rotate (partial rotary)", 0.0,
               1.0},
          },
          Placement::EveryLayer, [](const SchemeContext& ctx, const SchemeOptions& o) -> PositionalScheme {
            return std::make_shared<RopeImpl>(ctx, o);
          }};
}

}  // namespace posenc
