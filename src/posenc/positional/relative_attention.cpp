// Relative schemes that add content-dependent score terms (and value terms):
//   shaw  learned a^K, a^V per clipped offset clip(j-i, -k, k) (Shaw, Uszkoreit, Vaswani 2018),
//         optionally with per-head content/position scales (the windowed attention of SuperML's positional-encoding guide)
//   xl    Transformer-XL (Dai et al. 2019): (q+u)·k + (q+v)·W_R R(i-j), R sinusoidal
// Neither builds an (Lq, Lk, Dh) tensor: q is multiplied with the table of
// distinct offsets, then the (Lq, Lk) index picks each pair's column.
#include "posenc/util/linear.h"
#include "posenc/errors.h"
#include "posenc/positional/relative_offsets.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"
#include "posenc/positional/tables.h"

namespace posenc {
namespace {

/// Picks per[b, h, i, index[i, j]]: (B, H, Lq, R) with index (Lq, Lk) -> (B, H, Lq, Lk).
torch::Tensor pick_columns(const torch::Tensor& per_offset, const torch::Tensor& index) {
  return per_offset.gather(-1, index.expand({per_offset.size(0), per_offset.size(1), index.size(0), index.size(1)}));
}

class ShawImpl : public PositionalSchemeImpl {
 public:
  ShawImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("shaw"), clip_(o.get_int("max_distance")), use_values_(o.get_bool("values")) {
    const double std = o.get_float("init_std");
    keys_ = register_parameter("keys", torch::randn({2 * clip_ + 1, ctx.head_dim}) * std);  // (2k+1, Dh)
    if (use_values_) values_ = register_parameter("values", torch::randn({2 * clip_ + 1, ctx.head_dim}) * std);
    if (o.get_bool("head_scales")) {
      content_scale_ = register_parameter("content_scale", torch::ones({ctx.heads}));
      position_scale_ = register_parameter("position_scale", torch::ones({ctx.heads}));
    }
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.score_terms = true;
    c.value_terms = use_values_;
    return c;
  }
  bool directional() const override { return true; }
  double attention_flops(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t Dh) const override {
    const double per_table = 2.0 * B * H * Lq * (2 * clip_ + 1) * Dh;  // q·a^K, and probs·a^V
    return per_table * (use_values_ ? 2 : 1) + (content_scale_.defined() ? 2.0 * B * H * Lq * Lk * Dh : 0.0);
  }

  torch::Tensor score_terms(const torch::Tensor& q, const torch::Tensor& /*k*/, const torch::Tensor& qk,
                            const Positions& pos) override {
    auto rel = pick_columns(torch::matmul(q, keys_.t()), index(pos));  // (B, H, Lq, 2k+1) -> (B, H, Lq, Lk)
    if (!content_scale_.defined()) return rel;
    // c_h q·k + p_h q·a^K, written as a term added to q·k.
    auto c = content_scale_.view({1, -1, 1, 1}), p = position_scale_.view({1, -1, 1, 1});
    return (c - 1.0) * qk + p * rel;
  }

  torch::Tensor value_terms(const torch::Tensor& probs, const Positions& pos) override {
    // Sum the probabilities that share an offset, then one (2k+1, Dh) product.
    auto idx = index(pos).expand_as(probs);
    auto per_offset = torch::zeros({probs.size(0), probs.size(1), probs.size(2), 2 * clip_ + 1}, probs.options());
    per_offset = per_offset.scatter_add(-1, idx, probs);  // (B, H, Lq, 2k+1)
    return torch::matmul(per_offset, values_);            // (B, H, Lq, Dh)
  }

 private:
  torch::Tensor index(const Positions& pos) {
    return once_per_forward(pos, "index", [&] {
      return relative_positions(pos.q, pos.k).clamp(-clip_, clip_) + clip_;  // (Lq, Lk) in 0..2k
    });
  }
  int64_t clip_;
  bool use_values_;
  torch::Tensor keys_, values_, content_scale_, position_scale_;
};

class XlImpl : public PositionalSchemeImpl {
 public:
  XlImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("xl"), heads_(ctx.heads), head_dim_(ctx.head_dim), d_model_(ctx.d_model) {
    if (d_model_ % 2 != 0) throw ConfigError("model.positional.type=xl needs an even model.d_model");
    u_ = register_parameter("u", torch::zeros({heads_, head_dim_}));  // global content bias
    v_ = register_parameter("v", torch::zeros({heads_, head_dim_}));  // global position bias
    w_r_ =
        register_module("w_r", torch::nn::Linear(torch::nn::LinearOptions(d_model_, heads_ * head_dim_).bias(false)));
    base_ = o.get_float("base");
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.score_terms = true;
    return c;
  }
  bool directional() const override { return true; }
  double attention_flops(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t Dh) const override {
    const int64_t R = Lq + Lk - 1;         // distinct offsets
    return 2.0 * B * H * Lq * R * Dh       // (q + v)·W_R R
           + 2.0 * H * Lk * Dh             // u·k
           + 2.0 * R * d_model_ * H * Dh;  // W_R R
  }

  torch::Tensor score_terms(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& /*qk*/,
                            const Positions& pos) override {
    // Offsets i - j of every pair, as an index into the table of distinct offsets.
    auto rel = -relative_positions(pos.q, pos.k);  // (Lq, Lk): query minus key
    const int64_t lo = -(pos.end - 1);             // ids are in [0, end): offsets in [lo, end)
    auto index = once_per_forward(pos, "index", [&] { return rel - lo; });
    auto r = once_per_forward(
        pos, "r",
        [&] {
          auto offsets =
              torch::arange(lo, pos.end, torch::TensorOptions().dtype(torch::kLong).device(q.device()));  // (R)
          auto projected = linear(w_r_, sinusoidal_table(offsets, d_model_, base_).to(q.scalar_type()));  // (R, H*Dh)
          return projected.view({-1, heads_, head_dim_}).permute({1, 2, 0});                              // (H, Dh, R)
        },
        q);
    auto content_bias = torch::matmul(u_.unsqueeze(1).unsqueeze(0), k.transpose(-2, -1));  // (1|B, H, 1, Lk)
    auto position = torch::matmul(q + v_.view({1, heads_, 1, head_dim_}), r);              // (B, H, Lq, R)
    return content_bias + pick_columns(position, index);                                   // (B, H, Lq, Lk)
  }

 private:
  int64_t heads_, head_dim_, d_model_;
  double base_;
  torch::Tensor u_, v_;
  torch::nn::Linear w_r_{nullptr};
};

}  // namespace

SchemeInfo shaw_scheme_info() {
  return {"shaw",
          "learned relative embeddings a^K (and a^V) per offset clipped to +-max_distance, added to keys and values "
          "(Shaw et al. 2018)",
          {{"max_distance", OptionKind::Int, 16, "offsets are clipped to [-k, k]", 1, 1 << 20},
           {"values", OptionKind::Bool, true, "also add a^V to the values"},
           {"head_scales", OptionKind::Bool, false,
            "windowed variant: per-head learned scales of content and position scores"},
           {"init_std", OptionKind::Float, 0.02, "standard deviation of the initial embeddings", 0.0, 10.0}},
          Placement::EveryLayer,
          [](const SchemeContext& c, const SchemeOptions& o) -> PositionalScheme {
            return std::make_shared<ShawImpl>(c, o);
          }};
}

SchemeInfo xl_scheme_info() {
  return {"xl",
          "Transformer-XL: (q+u)·k + (q+v)·W_R R(i-j) with sinusoidal R and learned u, v per head (Dai et al. 2019)",
          {{"base", OptionKind::Float, 10000.0, "frequency base of R", 1.0, 1e12}},
          Placement::EveryLayer,
          [](const SchemeContext& c, const SchemeOptions& o) -> PositionalScheme {
            return std::make_shared<XlImpl>(c, o);
          }};
}

}  // namespace posenc
