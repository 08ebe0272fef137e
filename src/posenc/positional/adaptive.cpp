// DAPE (Zheng et al. 2024, "DAPE: Data-Adaptive Positional Encoding for Length
// Extrapolation"): a positional bias refined by the content of each score.
//   scores <- A + B + f([A; B])
// A: the scaled content scores q·kᵀ/√d (B, H, Lq, Lk); B: a KERPLE log bias
// -r1 log(1 + r2 |i-j|), r1, r2 > 0 learned per head (Chi et al. 2022); f: an
// MLP over the heads of one (i, j), 2H -> hidden -> H with a GELU. f reads
// one query-key pair at a time, so a decoder's causal mask (added after it)
// and a KV cache hold as for any bias.
#include "posenc/positional/relative_offsets.h"
#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"
#include "posenc/util/linear.h"

namespace posenc {
namespace {

constexpr double kMinR = 0.01;  // the floors of KERPLE's r1 and r2 (its defaults)

class DapeImpl : public PositionalSchemeImpl {
 public:
  DapeImpl(const SchemeContext& ctx, const SchemeOptions& o) : PositionalSchemeImpl("dape") {
    // KERPLE log's initialization: r1 uniform in (0, 2), r2 in (0, 1), raised to the floor.
    r1_ = register_parameter("r1", (torch::rand({ctx.heads}) * 2.0).clamp_min(kMinR));
    r2_ = register_parameter("r2", torch::rand({ctx.heads}).clamp_min(kMinR));
    hidden_units_ = o.get_int("hidden");
    hidden_ = register_module("hidden", torch::nn::Linear(2 * ctx.heads, hidden_units_));
    // No output bias: a constant per head adds the same to every score of a
    // row, which the softmax cancels (its gradient would be round-off only).
    out_ = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(hidden_units_, ctx.heads).bias(false)));
  }
  Capabilities capabilities() const override { return Capabilities::score_reweighting(); }
  /// B is symmetric in i - j and f reads each pair alone: reversal-symmetric.
  bool directional() const override { return false; }

  double attention_flops(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t) const override {
    const double pairs = static_cast<double>(B) * Lq * Lk;
    return pairs * (2.0 * 2 * H * hidden_units_ + 2.0 * hidden_units_ * H + 8.0 * hidden_units_);  // two layers, GELU
  }

  /// scores (B, H, Lq, Lk), the scaled content scores -> the same plus B and f.
  torch::Tensor reweight(const torch::Tensor& scores, const Positions& pos) override {
    auto bias = once_per_forward(
        pos, "dape", [&] { return kerple_log_bias(pos).to(scores.scalar_type()); }, scores);  // (1|B, H, Lq, Lk)
    auto pair = torch::cat({scores, bias.expand_as(scores)}, 1).permute({0, 2, 3, 1});        // (B, Lq, Lk, 2H)
    auto f = linear(out_, torch::gelu(linear(hidden_, pair)));                                // (B, Lq, Lk, H)
    return scores + bias + f.permute({0, 3, 1, 2});
  }

 private:
  /// -r1 log(1 + r2 |i-j|) over the model's count or a task's ids: (1 or B, H, Lq, Lk).
  torch::Tensor kerple_log_bias(const Positions& pos) const {
    auto distance = bias_offsets(pos).abs().to(r1_.scalar_type()).unsqueeze(-3);  // (1, Lq, Lk) or (B, 1, Lq, Lk)
    return with_batch_dim(kerple_kernel(r1_, r2_, kMinR, kMinR, distance, /*power=*/false));
  }

  int64_t hidden_units_ = 0;
  torch::Tensor r1_, r2_;
  torch::nn::Linear hidden_{nullptr}, out_{nullptr};
};

}  // namespace

SchemeInfo dape_scheme_info() {
  SchemeInfo info{"dape",
                  "data-adaptive: scores + B + MLP([scores; B]) over the heads of each pair, B a KERPLE log bias "
                  "-r1*log(1+r2*|i-j|) (Zheng et al. 2024)",
                  {{"hidden", OptionKind::Int, 32, "hidden units of the MLP (2*heads -> hidden -> heads)", 1, 4096}},
                  Placement::EveryLayer,
                  construct<DapeImpl>};
  info.reads_task_positions = true;  // B over the difference of two task ids
  return info;
}

}  // namespace posenc
