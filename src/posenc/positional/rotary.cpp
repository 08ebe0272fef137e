// Rotary position embedding (Su et al., RoFormer): q and k are rotated pairwise
// by p * theta_i, so q_m · k_n depends on m - n only. Values are not rotated.
//
// Scaling for sequences longer than the trained ones (`scaling`, `factor`,
// `original_max_position`), following the formulas of HF transformers'
// modeling_rope_utils.py (written here from them, not copied):
//   linear       theta_i / s (positions interpolated: s*p rotates as p did)
//   ntk          base * s^(R/(R-2)) (NTK-aware: high frequencies kept, low ones stretched)
//   dynamic_ntk  ntk with s_eff = s*L/L0 - (s-1) when the sequence L exceeds L0, else unscaled
//   yarn         per-frequency blend of theta_i and theta_i/s by a linear ramp between the
//                wavelengths of beta_fast=32 and beta_slow=1 rotations over L0, and cos/sin
//                multiplied by 0.1 ln(s) + 1 (Peng et al. 2023)
// and p-RoPE (`drop_low_frequencies`: the lowest fraction of frequencies is set to
// zero, leaving those pairs unrotated; Barbero et al. 2024).
#include <cmath>

#include "posenc/errors.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"
#include "posenc/positional/tables.h"

namespace posenc {
namespace {

const double kPi = std::acos(-1.0);

class RopeImpl : public PositionalSchemeImpl {
 public:
  RopeImpl(const SchemeContext& ctx, const SchemeOptions& o, const std::string& name = "rope")
      : PositionalSchemeImpl(name),
        base_(o.get_float("base")),
        interleaved_(o.get_string("layout") == "interleaved"),
        scaling_(o.get_string("scaling")),
        factor_(o.get_float("factor")),
        original_(o.get_int("original_max_position")),
        drop_low_(o.get_float("drop_low_frequencies")) {
    // Without a scaling, factor and original_max_position change nothing: a
    // value there is a forgotten `scaling`, not a setting to ignore.
    if (scaling_ == "none" && (factor_ != 1.0 || original_ != 0))
      throw ConfigError(std::string("model.positional.") + (factor_ != 1.0 ? "factor" : "original_max_position") +
                        " has no effect with model.positional.scaling=none; choose a scaling (linear, ntk, "
                        "dynamic_ntk or yarn) or leave it out");
    if (scaling_ != "none" && original_ < 1)
      throw ConfigError("model.positional.scaling=" + scaling_ +
                        " needs model.positional.original_max_position (the longest position count seen in "
                        "training, e.g. task.max_length + 1 with CLS pooling)");
    const double fraction = o.get_float("fraction");
    // Rotation acts on pairs: at fraction 1 an odd head dimension would leave
    // its last dimension unrotated while the config claims all are.
    if (fraction >= 1.0 && ctx.head_dim % 2 != 0)
      throw IncompatibleConfig("model.positional.type=" + name +
                               " rotates pairs of dimensions, but the head dimension is " +
                               std::to_string(ctx.head_dim) +
                               " (odd: model.d_model / model.heads); use an even head dimension, or "
                               "model.positional.fraction < 1 to leave dimensions unrotated on purpose");
    rot_dim_ = static_cast<int64_t>(fraction * ctx.head_dim) / 2 * 2;  // even number of rotated dims
    if (rot_dim_ < 2)
      throw ConfigError("model.positional.fraction=" + std::to_string(fraction) + " rotates " +
                        std::to_string(rot_dim_) + " of head_dim " + std::to_string(ctx.head_dim) + " dims; " + name +
                        " needs at least 2");
  }
  Capabilities capabilities() const override { return Capabilities::rotation(); }
  bool supports_kv_cache() const override { return scaling_ != "dynamic_ntk"; }  // its base follows the length
  bool directional() const override { return true; }

  /// Rotates at the ids a task defines where attention reads them (each row
  /// its own, Positions::task_q and task_k), else at the model's count.
  void rotate(torch::Tensor& q, torch::Tensor& k, const Positions& pos) override {
    const bool task = pos.task_q.defined();
    q = apply(q, task ? pos.task_q : pos.q, pos, "q");
    k = apply(k, task ? pos.task_k : pos.k, pos, "k");
  }

 protected:
  /// x (B, H, L, Dh) rotated at the given positions: (L), or (B, L) per row.
  torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& positions, const Positions& pos, const char* which) {
    // cos/sin once per forward, shared by every layer using this instance.
    auto cs = once_per_forward(
        pos, which,
        [&] {
          double attention_factor = 1.0;
          const int64_t end = positions.dim() == 2 ? pos.task_end : pos.end;    // dynamic NTK's length
          auto theta = frequencies(end, positions.device(), attention_factor);  // (R/2) float64
          auto angle = positions.to(torch::kFloat64).unsqueeze(-1) * theta;     // ([B,] L, R/2)
          auto cs = (torch::stack({angle.cos(), angle.sin()}) * attention_factor)
                        .to(x.device(), x.scalar_type());      // (2, [B,] L, R/2)
          return positions.dim() == 2 ? cs.unsqueeze(2) : cs;  // (2, L, R/2) or (2, B, 1, L, R/2)
        },
        x);
    auto cos = cs[0], sin = cs[1];  // (L, R/2) or (B, 1, L, R/2), broadcast over (B, H)
    auto rot = x.narrow(-1, 0, rot_dim_);
    torch::Tensor out;
    if (interleaved_) {
      auto pairs = rot.unflatten(-1, {rot_dim_ / 2, 2});                                     // (B, H, L, R/2, 2)
      auto even = pairs.select(-1, 0), odd = pairs.select(-1, 1);                            // (B, H, L, R/2)
      out = torch::stack({even * cos - odd * sin, even * sin + odd * cos}, -1).flatten(-2);  // (B, H, L, R)
    } else {
      auto x1 = rot.narrow(-1, 0, rot_dim_ / 2), x2 = rot.narrow(-1, rot_dim_ / 2, rot_dim_ / 2);
      out = torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);  // (B, H, L, R)
    }
    if (rot_dim_ == x.size(-1)) return out;
    return torch::cat({out, x.narrow(-1, rot_dim_, x.size(-1) - rot_dim_)}, -1);  // pass-through dims
  }

  /// theta_i (R/2, float64) for a forward whose positions end before `length`,
  /// after scaling and p-RoPE; sets the factor that multiplies cos and sin.
  torch::Tensor frequencies(int64_t length, torch::Device device, double& attention_factor) const {
    const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(device);
    const double R = static_cast<double>(rot_dim_), s = factor_;
    auto i = torch::arange(rot_dim_ / 2, opts);  // (R/2)
    const auto at_base = [&](double base) { return torch::pow(torch::full({}, base, opts), -2.0 * i / R); };
    torch::Tensor theta;
    if (scaling_ == "linear") {
      theta = at_base(base_) / s;
    } else if (scaling_ == "ntk") {
      theta = at_base(base_ * std::pow(s, R / (R - 2.0)));
    } else if (scaling_ == "dynamic_ntk") {
      const double L = static_cast<double>(std::max(length, original_));
      theta = at_base(base_ * std::pow(s * L / static_cast<double>(original_) - (s - 1.0), R / (R - 2.0)));
    } else if (scaling_ == "yarn") {
      // The pair index at which a frequency makes `rotations` turns over original_ positions.
      const auto pair_for = [&](double rotations) {
        return R * std::log(static_cast<double>(original_) / (rotations * 2.0 * kPi)) / (2.0 * std::log(base_));
      };
      const double low = std::max(std::floor(pair_for(32.0)), 0.0);
      double high = std::min(std::ceil(pair_for(1.0)), R - 1.0);
      if (high == low) high += 0.001;
      auto ramp = ((i - low) / (high - low)).clamp(0.0, 1.0);  // 0: fast pairs kept, 1: slow pairs interpolated
      auto unscaled = at_base(base_);
      theta = unscaled / s * ramp + unscaled * (1.0 - ramp);
      attention_factor = s > 1.0 ? 0.1 * std::log(s) + 1.0 : 1.0;
    } else {
      theta = at_base(base_);
    }
    const int64_t dropped = static_cast<int64_t>(std::llround(drop_low_ * (rot_dim_ / 2)));
    if (dropped > 0)
      theta = theta.clone().index_fill_(
          0, torch::arange(rot_dim_ / 2 - dropped, rot_dim_ / 2, opts.dtype(torch::kLong)), 0.0);
    return theta;
  }

  double base_;
  bool interleaved_;
  std::string scaling_;
  double factor_;
  int64_t original_;
  double drop_low_;
  int64_t rot_dim_;
};

/// xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE, then
/// each rotated pair i of a query at position n scaled by zeta_i^(n/scale_base)
/// and of a key by zeta_i^(-n/scale_base), zeta_i = (2i/R + gamma)/(1 + gamma),
/// so q_m . k_n gains zeta^((m-n)/scale_base): a decay with distance that still
/// depends on m - n only. Positions are centred on floor(end/2) before the
/// power, against overflow at long lengths. torchscale centres on ceil(L/2):
/// the two agree for even lengths, and the centre cancels in q . k either way.
class XposImpl : public RopeImpl {
 public:
  XposImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : RopeImpl(ctx, o, "xpos"), gamma_(o.get_float("gamma")), scale_base_(o.get_float("scale_base")) {}
  bool supports_kv_cache() const override { return false; }  // scales are centred on the length

  void rotate(torch::Tensor& q, torch::Tensor& k, const Positions& pos) override {
    RopeImpl::rotate(q, k, pos);
    q = q * scales(pos, pos.q, 1.0, q, "xpos_q");
    k = k * scales(pos, pos.k, -1.0, k, "xpos_k");
  }

 private:
  /// zeta^(sign * (p - end/2) / scale_base) per dimension: (L, Dh), 1 on unrotated dims.
  torch::Tensor scales(const Positions& pos, const torch::Tensor& positions, double sign, const torch::Tensor& like,
                       const char* key) {
    return once_per_forward(
        pos, key,
        [&] {
          const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(positions.device());
          const double R = static_cast<double>(rot_dim_);
          auto zeta = (2.0 * torch::arange(rot_dim_ / 2, opts) / R + gamma_) / (1.0 + gamma_);  // (R/2)
          auto power = sign * (positions.to(torch::kFloat64) - static_cast<double>(pos.end / 2)) / scale_base_;  // (L)
          auto s = torch::pow(zeta.unsqueeze(0), power.unsqueeze(1));              // (L, R/2)
          s = interleaved_ ? s.repeat_interleave(2, -1) : torch::cat({s, s}, -1);  // (L, R)
          const int64_t Dh = like.size(-1);
          if (rot_dim_ < Dh) s = torch::cat({s, torch::ones({s.size(0), Dh - rot_dim_}, opts)}, -1);  // (L, Dh)
          return s.to(like.device(), like.scalar_type());
        },
        like);
  }

  double gamma_, scale_base_;
};

}  // namespace

namespace {

/// RoPE's options, shared by xpos (which rotates the same way).
std::vector<OptionSpec> rope_options() {
  return {
      {"base", OptionKind::Float, 10000.0, "frequency base", 1.0, 1e12},
      {"layout",
       OptionKind::String,
       "half",
       "half: rotate (x[:R/2], x[R/2:]) as in HF/LLaMA; interleaved: rotate pairs (2i, 2i+1) as in the paper",
       0,
       0,
       {"half", "interleaved"}},
      {"fraction", OptionKind::Float, 1.0, "fraction of each head's dims that rotate (partial rotary)", 0.0, 1.0},
      {"scaling",
       OptionKind::String,
       "none",
       "for lengths past training: none, linear (interpolation), ntk, dynamic_ntk or yarn (HF transformers' "
       "formulas)",
       0,
       0,
       {"none", "linear", "ntk", "dynamic_ntk", "yarn"}},
      {"factor", OptionKind::Float, 1.0, "the scaling factor s (target length / original_max_position)", 1.0, 1e6},
      {"original_max_position", OptionKind::Int, 0, "positions seen in training (needed by every scaling but none)", 0,
       int64_t{1} << 40},
      {"drop_low_frequencies", OptionKind::Float, 0.0,
       "p-RoPE: the lowest fraction of frequencies is set to 0, leaving those pairs unrotated", 0.0, 1.0},
  };
}

}  // namespace

SchemeInfo rope_scheme_info() {
  SchemeInfo info{
      "rope",
      "rotary: q and k rotated pairwise by p*theta_i, theta_i = base^(-2i/Dh); q·k depends on m-n only (Su et al.)",
      rope_options(), Placement::EveryLayer, construct<RopeImpl>};
  info.reads_task_positions = true;  // rotated by the task's ids, q·k depends on their difference
  return info;
}

SchemeInfo xpos_scheme_info() {
  auto options = rope_options();
  // gamma = 0 makes zeta_0 = 0, whose negative powers are inf: NaN scores.
  options.push_back({"gamma", OptionKind::Float, 0.4, "zeta_i = (2i/R + gamma)/(1 + gamma); above 0", 1e-6, 1e6});
  options.push_back(
      {"scale_base", OptionKind::Float, 512.0, "positions are divided by it in the exponent", 1e-6, 1e12});
  return {"xpos",
          "RoPE with a per-pair exponential scale: q by zeta_i^(n/scale_base), k by zeta_i^(-n/scale_base), so "
          "q_m.k_n decays with m-n (Sun et al. 2022)",
          options, Placement::EveryLayer, construct<XposImpl>};
}

}  // namespace posenc
