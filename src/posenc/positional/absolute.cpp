// Embedding-time schemes: the position is added to the token representation.
//   none        no position at all (the encoder is permutation-equivariant)
//   sinusoidal  x + PE(p), fixed (Vaswani et al. 2017)
//   learned     x + E[p], a trainable table of max_positions rows
//   dynamic     sinusoids gated by the content (SuperML's positional-encoding guide)
#include <cmath>
#include <string>

#include "posenc/util/linear.h"
#include "posenc/errors.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"
#include "posenc/positional/tables.h"

namespace posenc {
namespace {

class NoneImpl : public PositionalSchemeImpl {
 public:
  NoneImpl() : PositionalSchemeImpl("none") {}
  Capabilities capabilities() const override { return {}; }
  bool directional() const override { return false; }
};

/// A (N, W) table's rows at ids (L) or (B, L) -> (1, L, W) or (B, L, W): the
/// model's positions 0..L-1 (or randomized ones) are one row of ids for every
/// example; a task's own positions (TaskBatch::positions) are one row per example.
torch::Tensor rows_at(const torch::Tensor& table, const torch::Tensor& ids) {
  auto rows = table.index_select(0, ids.reshape({-1}));  // (L or B*L, W)
  return ids.dim() == 1 ? rows.unsqueeze(0) : rows.view({ids.size(0), ids.size(1), table.size(1)});
}

class SinusoidalImpl : public PositionalSchemeImpl {
 public:
  SinusoidalImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("sinusoidal"),
        dim_(ctx.d_model),
        base_(o.get_float("base")),
        layout_(o.get_string("layout")),
        concat_(o.get_string("combine") == "concat"),
        token_scale_(o.get_bool("scale_tokens") ? std::sqrt(static_cast<double>(ctx.d_model)) : 1.0) {
    // Like RoPE's factor without a scaling: a width for a concatenation that
    // does not happen is a forgotten `combine`, not a setting to ignore.
    if (!concat_ && o.get_int("concat_dim") > 0)
      throw ConfigError(
          "model.positional.concat_dim has no effect with model.positional.combine=add; set combine "
          "to concat or leave concat_dim out");
    pe_dim_ = concat_ ? (o.get_int("concat_dim") > 0 ? o.get_int("concat_dim") : dim_ / 2) : dim_;
    if (pe_dim_ % 2 != 0 || pe_dim_ > dim_ || (concat_ && pe_dim_ == dim_))
      throw ConfigError("model.positional: sinusoidal needs an even encoding width below model.d_model " +
                        std::to_string(dim_) + " (got " + std::to_string(pe_dim_) + ")");
  }
  Capabilities capabilities() const override { return Capabilities::embedding(); }
  bool directional() const override { return true; }

  torch::Tensor embed(const torch::Tensor& x, const Positions& pos) override {
    auto pe = once_per_forward(
        pos, "pe",
        [&] {
          // (1|B, L, P): ids (L) or a task's (B, L)
          const auto ids = pos.q.reshape({-1});
          auto table = sinusoidal_table(ids, pe_dim_, base_, layout_).to(x.device(), x.scalar_type());
          return pos.q.dim() == 1 ? table.unsqueeze(0) : table.view({pos.q.size(0), pos.q.size(1), pe_dim_});
        },
        x);
    auto tokens = token_scale_ == 1.0 ? x : x * token_scale_;  // x * sqrt(D) + PE, the scaling of Vaswani et al.
    if (!concat_) return tokens + pe;                          // (B, L, D)
    // Concatenation at the same width ("The Position Problem" tutorial, docs/sources.md): [first D-P token dims ‖ PE].
    auto kept = tokens.narrow(-1, 0, dim_ - pe_dim_);                       // (B, L, D-P)
    return torch::cat({kept, pe.expand({x.size(0), -1, -1})}, /*dim=*/-1);  // (B, L, D)
  }

 private:
  int64_t dim_, pe_dim_ = 0;
  double base_;
  std::string layout_;
  bool concat_;
  double token_scale_;
};

class LearnedImpl : public PositionalSchemeImpl {
 public:
  LearnedImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("learned"), max_positions_(o.get_int("max_positions")) {
    table_ = register_parameter("table", torch::randn({max_positions_, ctx.d_model}) * o.get_float("init_std"));
    if (o.get_bool("scaled")) {
      // A learned scale per position, then LayerNorm of the sum (SuperML's positional-encoding guide).
      scale_ = register_parameter("scale", torch::ones({max_positions_, 1}));
      norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({ctx.d_model})));
    }
  }
  Capabilities capabilities() const override { return Capabilities::embedding(); }
  bool directional() const override { return true; }
  int64_t max_positions() const override { return max_positions_; }
  bool has_position_table() const override { return true; }

  torch::Tensor embed(const torch::Tensor& x, const Positions& pos) override {
    TORCH_CHECK(pos.end <= max_positions_, "learned positions: position ", pos.end - 1,
                " has no row in the table of model.positional.max_positions=", max_positions_,
                " rows; train with a larger max_positions to evaluate this length");
    auto rows = rows_at(table_, pos.q);      // (1|B, L, D)
    if (!scale_.defined()) return x + rows;  // (B, L, D)
    rows = rows * rows_at(scale_, pos.q);    // (1|B, L, D)
    return norm_->forward(x + rows);         // (B, L, D)
  }

 private:
  int64_t max_positions_;
  torch::Tensor table_;  // (max_positions, D)
  torch::Tensor scale_;  // (max_positions, 1) when scaled
  torch::nn::LayerNorm norm_{nullptr};
};

/// Sinusoids gated by the content (the DynamicPositionalEncoder of SuperML's positional-encoding guide).
/// out = x * c + PE * p * sigmoid(MLP(x) * a) * sigmoid(L / max_length * b)
class DynamicImpl : public PositionalSchemeImpl {
 public:
  DynamicImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("dynamic"), dim_(ctx.d_model), max_length_(o.get_int("max_length")) {
    if (dim_ % 2 != 0) throw ConfigError("model.positional.type=dynamic needs an even model.d_model");
    content_scale_ = register_parameter("content_scale", torch::ones({dim_}));
    position_scale_ = register_parameter("position_scale", torch::ones({dim_}));
    gate_in_ = register_module("gate_in", torch::nn::Linear(dim_, 2 * dim_));
    gate_out_ = register_module("gate_out", torch::nn::Linear(2 * dim_, dim_));
    content_factor_ = register_parameter("content_factor", torch::ones({1}));
    length_factor_ = register_parameter("length_factor", torch::ones({1}));
  }
  Capabilities capabilities() const override { return Capabilities::embedding(); }
  bool supports_kv_cache() const override { return false; }  // its scale depends on the length
  bool directional() const override { return true; }
  double embed_flops(int64_t B, int64_t L, int64_t D) const override { return 2.0 * B * L * (D * 2 * D) * 2; }

  torch::Tensor embed(const torch::Tensor& x, const Positions& pos) override {
    auto pe = once_per_forward(
        pos, "pe",
        [&] {
          return sinusoidal_table(pos.q, dim_, 10000.0).to(x.device(), x.scalar_type());  // (L, D)
        },
        x);
    auto gate = torch::sigmoid(linear(gate_out_, torch::gelu(linear(gate_in_, x))) * content_factor_);  // (B, L, D)
    auto length_scale = torch::sigmoid(length_factor_ * (static_cast<double>(pos.q.size(0)) / max_length_));  // (1)
    return x * content_scale_ + pe.unsqueeze(0) * position_scale_ * gate * length_scale;  // (B, L, D)
  }

 private:
  int64_t dim_, max_length_;
  torch::Tensor content_scale_, position_scale_, content_factor_, length_factor_;
  torch::nn::Linear gate_in_{nullptr}, gate_out_{nullptr};
};

}  // namespace

SchemeInfo none_scheme_info() {
  SchemeInfo info{
      "none",
      "no positional information: the encoder is permutation-equivariant (chance on ordering)",
      {},
      Placement::Input,
      [](const SchemeContext&, const SchemeOptions&) -> PositionalScheme { return std::make_shared<NoneImpl>(); }};
  info.reads_task_positions = true;  // it reads none
  return info;
}

SchemeInfo sinusoidal_scheme_info() {
  SchemeInfo info{"sinusoidal",
                  "fixed sin/cos of p*base^(-2i/D) added to the token embedding (Vaswani et al. 2017)",
                  {
                      {"base", OptionKind::Float, 10000.0, "frequency base", 1.0, 1e12},
                      {"layout",
                       OptionKind::String,
                       "interleaved",
                       "interleaved: sin at even, cos at odd dims (the paper); concat: [sin ‖ cos]",
                       0,
                       0,
                       {"interleaved", "concat"}},
                      {"combine",
                       OptionKind::String,
                       "add",
                       "add: x + PE; concat: [x ‖ PE] at the same width (the last concat_dim token dims give way)",
                       0,
                       0,
                       {"add", "concat"}},
                      {"concat_dim", OptionKind::Int, 0, "width of PE when combine=concat (0: d_model/2)", 0, 1 << 20},
                      {"scale_tokens", OptionKind::Bool, false,
                       "multiply token embeddings by sqrt(d_model) first (as Vaswani et al. do)"},
                  },
                  Placement::Input,
                  [](const SchemeContext& ctx, const SchemeOptions& o) -> PositionalScheme {
                    return std::make_shared<SinusoidalImpl>(ctx, o);
                  }};
  info.reads_task_positions = true;
  return info;
}

SchemeInfo learned_scheme_info() {
  SchemeInfo info{"learned",
                  "trainable table E[p] added to the token embedding (BERT, GPT-2); rows past the training length stay "
                  "untrained; positions >= max_positions are an error",
                  {
                      {"max_positions", OptionKind::Int, 1024, "rows in the table (largest position + 1)", 1, 1 << 24},
                      {"init_std", OptionKind::Float, 0.02, "standard deviation of the initial rows", 0.0, 10.0},
                      {"scaled", OptionKind::Bool, false, "per-position learned scale, then LayerNorm of the sum"},
                  },
                  Placement::Input,
                  [](const SchemeContext& ctx, const SchemeOptions& o) -> PositionalScheme {
                    return std::make_shared<LearnedImpl>(ctx, o);
                  }};
  info.reads_task_positions = true;
  return info;
}

}  // namespace posenc

namespace posenc {

SchemeInfo dynamic_scheme_info() {
  return {"dynamic",
          "content-gated sinusoids: x*c + "
          "PE*p*sigmoid(MLP(x)*a)*sigmoid(L/max_length*b), all learned",
          {{"max_length", OptionKind::Int, 5000, "length scale of the length gate", 1, 1 << 24}},
          Placement::Input,
          [](const SchemeContext& ctx, const SchemeOptions& o) -> PositionalScheme {
            return std::make_shared<DynamicImpl>(ctx, o);
          }};
}

}  // namespace posenc
