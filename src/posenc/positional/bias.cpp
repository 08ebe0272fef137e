// Bias schemes: a (1, H, Lq, Lk) term added to the scaled attention scores,
// computed once per forward and shared by the layers that hold the instance.
// (ALiBi and the biases proposed after it for length extrapolation are in
// extrapolation_bias.cpp.)
//   t5     learned scalar per (relative-position bucket, head) (Raffel et al.)
//   ape    scale * (1 - |i-j| / L) (Attention Positional Encoding, Bhorania)
//   decay  exp(-|i-j| / tau), tau fixed or learned (SuperML's positional-encoding guide)
// The symmetric ones (ape, decay) take the shared `directional` option
// (OffsetBiasImpl, relative_offsets.h).
#include "posenc/errors.h"
#include "posenc/positional/relative_offsets.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"

namespace posenc {
namespace {

/// A scalar registered as a parameter when learnable, else as a (non-trained) buffer.
torch::Tensor register_scalar(torch::nn::Module& m, const std::string& name, double value, bool learnable) {
  auto t = torch::tensor(value);
  return learnable ? m.register_parameter(name, t) : m.register_buffer(name, t);
}

class T5Impl : public PositionalSchemeImpl {
 public:
  T5Impl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("t5"),
        num_buckets_(o.get_int("num_buckets")),
        max_distance_(o.get_int("max_distance")),
        bidirectional_(o.get_bool("bidirectional")) {
    if (bidirectional_ && num_buckets_ % 2 != 0)
      throw ConfigError("model.positional.num_buckets=" + std::to_string(num_buckets_) +
                        " must be even when bidirectional (half the buckets per sign)");
    if (max_distance_ <= (bidirectional_ ? num_buckets_ / 4 : num_buckets_ / 2))
      throw ConfigError("model.positional.max_distance=" + std::to_string(max_distance_) +
                        " must exceed the exact-bucket range of num_buckets=" + std::to_string(num_buckets_));
    table_ = register_parameter("table", torch::randn({num_buckets_, ctx.heads}) * o.get_float("init_std"));
  }
  Capabilities capabilities() const override { return Capabilities::additive_bias(); }
  // Bidirectional: separate buckets per sign. Causal: keys to the right all share bucket 0
  // while keys to the left get their own. Either way left and right differ.
  bool directional() const override { return true; }

  torch::Tensor bias(const Positions& pos) override {
    auto buckets = once_per_forward(pos, "buckets", [&] {
      return t5_buckets(bias_offsets(pos), num_buckets_, max_distance_, bidirectional_);  // (Lq, Lk) or (B, Lq, Lk)
    });
    return once_per_forward(pos, "bias", [&] {
      // The same gather either way; what differs is its backward, which sums
      // the thousands of positions of each of the few buckets. On CUDA,
      // index's backward sums each bucket's positions one by one (54 ms of a
      // step at length 512 on an H200, docs/gpu/gpu-report-2026-11-27-h200.md)
      // where embedding's sums them in parallel; on the CPU index's is the
      // faster one (3.1 against 9.5 ms forward and backward at length 512, LibTorch 1.13).
      const auto rows = buckets.is_cuda() ? torch::embedding(table_, buckets) : table_.index({buckets});
      // Contiguous: the fused attention kernels read a bias whose last
      // dimension is contiguous, and movedim leaves a stride of H there.
      return with_batch_dim(rows.movedim(-1, -3).contiguous());  // (..., Lq, Lk, H) -> (1 or B, H, Lq, Lk)
    });
  }

 private:
  int64_t num_buckets_, max_distance_;
  bool bidirectional_;
  torch::Tensor table_;  // (buckets, H)
};

class ApeImpl : public OffsetBiasImpl {
 public:
  ApeImpl(const SchemeContext& ctx, const SchemeOptions& o) : OffsetBiasImpl("ape") {
    scale_ = register_scalar(*this, "scale", o.get_float("scale"), o.get_bool("learnable"));
    register_direction(ctx.heads, o);
  }
  bool supports_kv_cache() const override { return false; }  // distances are divided by the length

 private:
  /// rel: (Lq, Lk) (ape reads no task ids).
  torch::Tensor symmetric_bias(const Positions& pos, const torch::Tensor& rel) override {
    // The source divides by the sequence length itself: the bias changes with L.
    auto distance = rel.abs().to(scale_.scalar_type());
    return (scale_ * (1.0 - distance / static_cast<double>(pos.k.size(0)))).unsqueeze(0);  // (1, Lq, Lk)
  }

  torch::Tensor scale_;
};

class DecayImpl : public OffsetBiasImpl {
 public:
  DecayImpl(const SchemeContext& ctx, const SchemeOptions& o) : OffsetBiasImpl("decay") {
    // tau is kept as log(tau) so that it stays positive when learned.
    log_tau_ = register_scalar(*this, "log_tau", std::log(o.get_float("tau")), o.get_bool("learnable"));
    register_direction(ctx.heads, o);
  }

 private:
  /// rel: (Lq, Lk) (decay reads no task ids).
  torch::Tensor symmetric_bias(const Positions& /*pos*/, const torch::Tensor& rel) override {
    return torch::exp(-rel.abs().to(log_tau_.scalar_type()) / log_tau_.exp()).unsqueeze(0);  // (1, Lq, Lk)
  }

  torch::Tensor log_tau_;
};

}  // namespace

SchemeInfo t5_scheme_info() {
  SchemeInfo info{
      "t5",
      "learned bias per (relative-position bucket, head): exact buckets near, log-spaced up to max_distance "
      "(Raffel et al.)",
      {{"num_buckets", OptionKind::Int, 32, "number of buckets (half per sign when bidirectional)", 2, 4096},
       {"max_distance", OptionKind::Int, 128, "offsets at or beyond this share the last bucket", 2, 1 << 24},
       {"bidirectional",
        OptionKind::Bool,
        true,
        "separate buckets for keys left and right of the query (false in a decoder: causal buckets)",
        -1e300,
        1e300,
        {},
        false},
       {"init_std", OptionKind::Float, 0.02, "standard deviation of the initial biases", 0.0, 10.0}},
      Placement::EveryLayer,
      construct<T5Impl>};
  info.reads_task_positions = true;  // a bias over the difference of two task ids
  return info;
}

SchemeInfo ape_scheme_info() {
  return {"ape",
          "Attention Positional Encoding: bias scale*(1 - |i-j|/L), L the sequence length",
          {{"scale", OptionKind::Float, 0.1, "height of the bias on the diagonal", -1e6, 1e6},
           {"learnable", OptionKind::Bool, false, "train the scale"},
           directional_option()},
          Placement::EveryLayer,
          construct<ApeImpl>};
}

SchemeInfo decay_scheme_info() {
  return {"decay",
          "bias exp(-|i-j|/tau), a smooth locality prior: a position-based attention bias",
          {{"tau", OptionKind::Float, 5.0, "decay length in positions", 1e-6, 1e9},
           {"learnable", OptionKind::Bool, false, "train tau (kept positive as log tau)"},
           directional_option()},
          Placement::EveryLayer,
          construct<DecayImpl>};
}

}  // namespace posenc
