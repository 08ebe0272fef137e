// Embedding-time schemes: the position is added to the token representation.
//   none        no position at all (the encoder is permutation-equivariant)
//   sinusoidal  x + PE(p), fixed (Vaswani et al. 2017)
//   learned     x + E[p], a trainable table of max_positions rows
#include <cmath>

#include "posenc/config.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/schemes.h"
#include "posenc/positional/tables.h"

namespace posenc {
namespace {

class NoneImpl : public PositionalSchemeImpl {
 public:
  NoneImpl() : PositionalSchemeImpl("none") {}
  Capabilities capabilities() const override { return {}; }
  bool directional() const override { return false; }
};

class SinusoidalImpl : public PositionalSchemeImpl {
 public:
  SinusoidalImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("sinusoidal"),
        dim_(ctx.d_model),
        base_(o.get_float("base")),
        layout_(o.get_string("layout")) {
    if (dim_ % 2 != 0)
      throw ConfigError("model.positional.type=sinusoidal needs an even model.d_model, got " + std::to_string(dim_));
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.embed = true;
    return c;
  }
  bool directional() const override { return true; }

  torch::Tensor embed(const torch::Tensor& x, const Positions& pos) override {
    auto pe = once_per_forward(pos, "pe", [&] {
      return sinusoidal_table(pos.q, dim_, base_, layout_).to(x.device(), x.scalar_type());  // (L, D)
    });
    return x + pe.unsqueeze(0);  // (B, L, D)
  }

 private:
  int64_t dim_;
  double base_;
  std::string layout_;
};

class LearnedImpl : public PositionalSchemeImpl {
 public:
  LearnedImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("learned"), max_positions_(o.get_int("max_positions")) {
    table_ = register_parameter("table", torch::randn({max_positions_, ctx.d_model}) * o.get_float("init_std"));
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.embed = true;
    return c;
  }
  bool directional() const override { return true; }
  int64_t max_positions() const override { return max_positions_; }
  bool has_position_table() const override { return true; }

  torch::Tensor embed(const torch::Tensor& x, const Positions& pos) override {
    TORCH_CHECK(pos.end <= max_positions_, "learned positions: position ", pos.end - 1,
                " has no row in the table of model.positional.max_positions=", max_positions_,
                " rows; train with a larger max_positions to evaluate this length");
    return x + table_.index_select(0, pos.q).unsqueeze(0);  // (B, L, D)
  }

 private:
  int64_t max_positions_;
  torch::Tensor table_;  // (max_positions, D)
};

}  // namespace

SchemeInfo none_scheme_info() {
  return {"none", "no positional information: the encoder is permutation-equivariant (chance on ordering)", {},
          Placement::Input, [](const SchemeContext&, const SchemeOptions&) -> PositionalScheme {
            return std::make_shared<NoneImpl>();
          }};
}

SchemeInfo sinusoidal_scheme_info() {
  return {"sinusoidal",
          "fixed sin/cos of p*base^(-2i/D) added to the token embedding (Vaswani et al. 2017)",
          {
              {"base", OptionKind::Float, 10000.0, "frequency base", 1.0, 1e12},
              {"layout", OptionKind::String, "interleaved",
               "interleaved: sin at even, cos at odd dims (the paper); concat: [sin ‖ cos]", 0, 0,
               {"interleaved", "concat"}},
          },
          Placement::Input, [](const SchemeContext& ctx, const SchemeOptions& o) -> PositionalScheme {
            return std::make_shared<SinusoidalImpl>(ctx, o);
          }};
}

SchemeInfo learned_scheme_info() {
  return {"learned",
          "trainable table E[p] added to the token embedding (BERT, GPT-2); rows past the training length stay "
          "untrained; positions >= max_positions are an error",
          {
              {"max_positions", OptionKind::Int, 1024, "rows in the table (largest position + 1)", 1, 1 << 24},
              {"init_std", OptionKind::Float, 0.02, "standard deviation of the initial rows", 0.0, 10.0},
          },
          Placement::Input, [](const SchemeContext& ctx, const SchemeOptions& o) -> PositionalScheme {
            return std::make_shared<LearnedImpl>(ctx, o);
          }};
}

}  // namespace posenc
