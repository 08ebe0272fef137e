// Additive biases for length extrapolation, ALiBi and those proposed since,
// each a (1, H, Lq, Lk) term added to the scaled scores and a function of i - j:
//   alibi     -m_h |i-j|, geometric slopes per head (Press et al. 2022, "Train
//             Short, Test Long: Attention with Linear Biases Enables Input
//             Length Extrapolation")
//   kerple    -r1 log(1 + r2 |i-j|) or -r1 |i-j|^r2, r1, r2 learned per head
//             (Chi et al. 2022, "KERPLE: Kernelized Relative Positional
//             Embedding for Length Extrapolation")
//   sandwich  the dot product of two sinusoidal position vectors,
//             sum_k cos((i-j) w_k), shifted to 0 on the diagonal and divided per
//             head (Chi et al. 2023, "Dissecting Transformer Length
//             Extrapolation via the Lens of Receptive Field Analysis")
//   fire      f(psi(|i-j|) / psi(max(T, i))), psi(x) = log(c x + 1), f an MLP
//             1 -> hidden -> H, c and the threshold T learned (Li et al. 2023,
//             "Functional Interpolation for Relative Positions Improves Long
//             Context Transformers"); for queries past T the distances are
//             compressed into the range seen in training (progressive
//             interpolation), so it is not Toeplitz there.
// All are symmetric in i - j and take the shared `directional` option
// (OffsetBiasImpl, relative_offsets.h).
#include <algorithm>
#include <cmath>

#include "posenc/errors.h"
#include "posenc/positional/relative_offsets.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"

namespace posenc {
namespace {

class AlibiImpl : public OffsetBiasImpl {
 public:
  AlibiImpl(const SchemeContext& ctx, const SchemeOptions& o) : OffsetBiasImpl("alibi") {
    slopes_ = register_buffer("slopes", torch::tensor(alibi_slopes(ctx.heads), torch::kFloat32));  // (H)
    register_direction(ctx.heads, o);
  }

 private:
  torch::Tensor symmetric_bias(const Positions& /*pos*/, const torch::Tensor& rel) override {
    return -slopes_.view({-1, 1, 1}) *
           rel.abs().to(slopes_.scalar_type()).unsqueeze(-3);  // (H, Lq, Lk) or (B, H, Lq, Lk)
  }

  torch::Tensor slopes_;
};

/// KERPLE's floor for r1 and r2 in the paper's code.
constexpr double kPaperFloor = 1e-2;

class KerpleImpl : public OffsetBiasImpl {
 public:
  /// Positivity: r1 and r2 are clamped from below in the forward pass (by
  /// default to 1e-2, as the paper's code clamps the parameters), and the power
  /// variant's exponent to <= 2 (a conditionally positive definite kernel).
  /// Higher floors (`min_r1`, `min_r2`) keep every head's bias falling off with
  /// distance, so that no head can become a global one; `free_heads` = k
  /// exempts the last k heads (they keep the paper's floors), so that heads
  /// held local can sit beside heads free to reach a far key.
  KerpleImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : OffsetBiasImpl("kerple"),
        power_(o.get_string("variant") == "power"),
        heads_(ctx.heads),
        free_heads_(o.get_int("free_heads")),
        min_r1_(o.get_float("min_r1")),
        min_r2_(o.get_float("min_r2")) {
    if (power_ && min_r2_ > 2.0)
      throw ConfigError("model.positional.min_r2=" + std::to_string(min_r2_) +
                        ": the power variant's exponent is at most 2");
    if (free_heads_ > heads_)
      throw ConfigError("model.positional.free_heads=" + std::to_string(free_heads_) + ": the model has " +
                        std::to_string(heads_) + " heads");
    // Initialization as in the paper's code: the factor outside the kernel
    // uniform in (0, 2) for log and (0, 1) for power, the one inside (0, 1) for
    // log, the exponent (0, 2) for power; raised to the floors, so that every
    // parameter starts where it has a gradient.
    r1_ = register_parameter("r1", floored(torch::rand({heads_}) * (power_ ? 1.0 : 2.0), min_r1_));
    r2_ = register_parameter("r2", floored(torch::rand({heads_}) * (power_ ? 2.0 : 1.0), min_r2_));
    register_direction(ctx.heads, o);
  }

 private:
  /// r (H) raised to `floor` in the held heads and to the paper's floor (or
  /// `floor`, if lower) in the free ones.
  torch::Tensor floored(const torch::Tensor& r, double floor) const {
    if (free_heads_ == 0) return r.clamp_min(floor);
    auto floors = torch::full({heads_}, floor, r.options());  // (H)
    floors.narrow(0, heads_ - free_heads_, free_heads_).fill_(std::min(floor, kPaperFloor));
    return torch::maximum(r, floors);
  }

  torch::Tensor symmetric_bias(const Positions& /*pos*/, const torch::Tensor& rel) override {
    auto distance = rel.abs().to(r1_.scalar_type()).unsqueeze(-3);  // (1, Lq, Lk) or (B, 1, Lq, Lk)
    // The floors are applied here, per head; the kernel's own clamp at the lowest floor then changes nothing.
    const double lowest_r1 = std::min(min_r1_, kPaperFloor), lowest_r2 = std::min(min_r2_, kPaperFloor);
    return kerple_kernel(floored(r1_, min_r1_), floored(r2_, min_r2_), lowest_r1, lowest_r2, distance,
                         power_);  // (H, Lq, Lk) or (B, H, Lq, Lk)
  }

  bool power_;
  int64_t heads_, free_heads_;
  double min_r1_, min_r2_;
  torch::Tensor r1_, r2_;  // (H)
};

class SandwichImpl : public OffsetBiasImpl {
 public:
  SandwichImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : OffsetBiasImpl("sandwich"), heads_(ctx.heads), dim_(ctx.head_dim), base_(o.get_float("base")) {
    if (dim_ < 2)
      throw IncompatibleConfig("model.positional.type=sandwich sums head_dim/2 frequencies; the head dimension is " +
                               std::to_string(dim_));
    register_direction(ctx.heads, o);
  }

 private:
  /// rel: (Lq, Lk) (sandwich reads no task ids).
  torch::Tensor symmetric_bias(const Positions& /*pos*/, const torch::Tensor& rel) override {
    // w_k = base^(-2k/d), k = 1..d/2, in float64 as the sinusoid tables are.
    auto k = torch::arange(1, dim_ / 2 + 1, torch::TensorOptions().dtype(torch::kFloat64).device(rel.device()));
    auto freq = torch::pow(base_, -2.0 * k / static_cast<double>(dim_));                       // (d/2)
    auto dot = torch::cos(rel.to(torch::kFloat64).unsqueeze(-1) * freq).sum(-1) - (dim_ / 2);  // (Lq, Lk), 0 at i = j
    // Head h (1-based) divides by 8h/H: sharp near the diagonal for the first
    // heads, wide for the last (the paper's per-head compression).
    auto h = torch::arange(1, heads_ + 1, torch::TensorOptions().dtype(torch::kFloat64).device(rel.device()));
    return (dot.unsqueeze(0) / (8.0 * h / static_cast<double>(heads_)).view({-1, 1, 1}))
        .to(torch::kFloat32);  // (H, Lq, Lk)
  }

  int64_t heads_, dim_;
  double base_;
};

class FireImpl : public OffsetBiasImpl {
 public:
  FireImpl(const SchemeContext& ctx, const SchemeOptions& o) : OffsetBiasImpl("fire") {
    const int64_t hidden = o.get_int("hidden");
    // nn::Linear's default initialization, as the paper's MLP.
    hidden_ = register_module("hidden", torch::nn::Linear(1, hidden));
    out_ = register_module("out", torch::nn::Linear(hidden, ctx.heads));
    // The output layer's bias adds one constant to every score of a head, which
    // the softmax cancels: its gradient is zero in exact arithmetic and only
    // round-off in float32, which AdamW's normalised step would turn into a
    // random walk (and which made the fused-vs-explicit gradient check compare
    // two round-off errors). It stays registered, frozen at zero, so that
    // checkpoints written with a trained one still load (its value changes
    // nothing).
    {
      torch::NoGradGuard no_grad;
      out_->bias.zero_();
    }
    out_->bias.set_requires_grad(false);
    c_ = register_parameter("c", torch::tensor(o.get_float("init_c")));
    threshold_ = register_parameter("threshold", torch::tensor(o.get_float("init_threshold")));
    register_direction(ctx.heads, o);
  }
  /// Symmetric while every query is below the threshold (as in training here);
  /// past it the query's own position enters through the normalizer.
  bool offset_only() const override { return false; }

 private:
  torch::Tensor symmetric_bias(const Positions& pos, const torch::Tensor& rel) override {
    const auto dtype = c_.scalar_type();
    const auto psi = [&](const torch::Tensor& x) { return torch::log1p(c_.abs() * x); };  // c kept positive by |c|
    auto query = bias_query_positions(pos).to(dtype);                                     // (Lq, 1) or (B, Lq, 1)
    auto normalizer = psi(torch::maximum(query, threshold_.abs()));                       // psi(max(T, i))
    auto x = (psi(rel.abs().to(dtype)) / normalizer).unsqueeze(-1);  // (..., Lq, Lk, 1), in [0, 1] up to T
    auto b = out_->forward(torch::relu(hidden_->forward(x)));        // (..., Lq, Lk, H)
    // Contiguous: the fused attention kernels read a bias whose last
    // dimension is contiguous, and movedim leaves a stride of H there.
    return b.movedim(-1, -3).contiguous();  // (H, Lq, Lk) or (B, H, Lq, Lk)
  }

  torch::nn::Linear hidden_{nullptr}, out_{nullptr};
  torch::Tensor c_, threshold_;
};

}  // namespace

SchemeInfo alibi_scheme_info() {
  SchemeInfo info{"alibi",
                  "bias -m_h*|i-j| with fixed geometric slopes m_h = 2^(-8(h+1)/H) (Press et al.); symmetric unless "
                  "directional",
                  {directional_option()},
                  Placement::EveryLayer,
                  construct<AlibiImpl>};
  info.reads_task_positions = true;  // a bias over the difference of two task ids
  return info;
}

SchemeInfo kerple_scheme_info() {
  SchemeInfo info{
      "kerple",
      "kernelized bias -r1*log(1+r2*|i-j|) (log) or -r1*|i-j|^r2 (power, r2 <= 2), r1, r2 > 0 learned per head "
      "(Chi et al. 2022)",
      {{"variant", OptionKind::String, "log", "log or power kernel", 0, 0, {"log", "power"}},
       {"min_r1", OptionKind::Float, kPaperFloor, "floor of r1 in the forward pass (the paper's code: 0.01)", 1e-6,
        1e6},
       {"min_r2", OptionKind::Float, kPaperFloor, "floor of r2 in the forward pass (the paper's code: 0.01)", 1e-6,
        1e6},
       {"free_heads", OptionKind::Int, 0,
        "the last k heads keep the paper's floors (0.01) whatever min_r1 and min_r2 say: heads free to reach far "
        "keys beside heads held local",
        0, 1 << 20},
       directional_option()},
      Placement::EveryLayer,
      construct<KerpleImpl>};
  info.reads_task_positions = true;  // a bias over the difference of two task ids
  return info;
}

SchemeInfo fire_scheme_info() {
  SchemeInfo info{"fire",
                  "learned bias MLP(psi(|i-j|) / psi(max(T, i))), psi(x) = log(c*x + 1), c and T learned: progressive "
                  "interpolation of distances for queries past T (Li et al. 2023)",
                  {{"hidden", OptionKind::Int, 32, "hidden units of the MLP (1 -> hidden -> heads)", 1, 4096},
                   {"init_c", OptionKind::Float, 0.1, "initial c of psi(x) = log(c*x + 1)", 1e-6, 1e6},
                   {"init_threshold", OptionKind::Float, 16.0,
                    "initial T: queries past it have their distances compressed (the paper uses a fraction of the "
                    "training length)",
                    1.0, 1e9},
                   directional_option()},
                  Placement::EveryLayer,
                  construct<FireImpl>};
  info.reads_task_positions = true;  // a bias over the difference of two task ids
  return info;
}

SchemeInfo sandwich_scheme_info() {
  return {"sandwich",
          "parameter-free bias (sum_k cos((i-j)*w_k) - d/2) / (8h/H): the dot product of sinusoidal position "
          "vectors, compressed per head (Chi et al. 2023)",
          {{"base", OptionKind::Float, 10000.0, "frequency base of the sinusoids, w_k = base^(-2k/d)", 2.0, 1e12},
           directional_option()},
          Placement::EveryLayer,
          construct<SandwichImpl>};
}

}  // namespace posenc
