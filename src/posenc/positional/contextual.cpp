// Positions counted from the content: CoPE and the Forgetting Transformer's forget gate.
//
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
//
// FoX, the Forgetting Transformer's forget gate (Lin et al. 2025). Every token t
// has a forget gate f_t in (0, 1) per head, and the logit of query i for key j
// is lowered by the log gates of the tokens between them:
//
//   D_ij = sum_{l=j+1..i} log f_l   for j <= i   (the paper, causal)
//   D_ij = sum_{l=i+1..j} log f_l   for j >  i   (an encoder's keys to the right)
//
// With F_t = sum_{l<=t} log f_l (non-increasing) both are -|F_i - F_j|, one
// cumsum. A constant gate is ALiBi with a learned slope -log f; a gate that
// depends on the token lets the model forget at some tokens and not at others.
// To the right the key's own gate counts, to the left the query's: the two
// neighbours of a token are weighed by different gates, so the scheme can tell
// left from right where the gates differ.
//
// The paper computes f_t = sigmoid(w·x_t + b) from the attention's input x_t;
// here the gate reads the head's key, f_t = sigmoid(w_h·k_t + b_h): k_t = W_k x_t,
// so this is the paper's gate through the key projection, and it is what the
// score-term hook sees (and what a KV cache keeps). D is added to the scaled
// logits as in the paper (the term returned is D·sqrt(Dh), before the scale).
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
  bool self_attention_only() const override { return true; }
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

/// The Forgetting Transformer's forget gate as a score term (the header comment).
class FoxImpl : public PositionalSchemeImpl {
 public:
  FoxImpl(const SchemeContext& ctx, const SchemeOptions& o)
      : PositionalSchemeImpl("fox"),
        content_gate_(o.get_string("gate") == "content"),
        unscale_(std::sqrt(double(ctx.head_dim))) {
    if (content_gate_)
      gate_weight_ =
          register_parameter("gate_weight", torch::randn({ctx.heads, ctx.head_dim}) * o.get_float("init_std"));
    gate_bias_ = register_parameter("gate_bias", torch::full({ctx.heads}, o.get_float("bias_init")));
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.score_terms = true;
    return c;
  }
  bool directional() const override { return content_gate_; }  // a constant gate is a bias over |i - j|
  bool offset_only() const override { return !content_gate_; }
  bool self_attention_only() const override { return true; }
  double attention_flops(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t Dh) const override {
    return (content_gate_ ? 2.0 * B * H * Lk * Dh : 0.0)  // w·k for every key
           + 4.0 * B * H * Lk                             // log-sigmoid and cumsum
           + 3.0 * B * H * Lq * Lk;                       // difference, absolute value, scale
  }

  torch::Tensor score_terms(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& /*qk*/,
                            const Positions& /*pos*/) override {
    const int64_t Lq = q.size(2), Lk = k.size(2);
    TORCH_CHECK(Lq <= Lk, "fox weighs the keys of a query's own sequence: self-attention only, got ", Lq,
                " queries and ", Lk, " keys");
    auto F = cumulative_log_gates(k);                       // (B|1, H, Lk) float32
    auto own = F.narrow(-1, Lk - Lq, Lq);                   // (B|1, H, Lq): the queries are the last Lq keys
    auto D = -(own.unsqueeze(-1) - F.unsqueeze(-2)).abs();  // (B|1, H, Lq, Lk)
    return (D * unscale_).to(q.scalar_type());
  }

  /// F_t = sum_{l<=t} log f_l over the keys, in float32 at least (a bf16 sum over hundreds of tokens
  /// would lose whole nats): (B, H, Lk), or (1, H, Lk) for a constant gate.
  torch::Tensor cumulative_log_gates(const torch::Tensor& k) const {
    const auto dtype = torch::promote_types(k.scalar_type(), torch::kFloat32);
    auto logit = gate_bias_.to(dtype).view({1, -1, 1});  // (1, H, 1)
    if (content_gate_)                                   // (B, H, Lk, Dh)·(H, Dh) -> (B, H, Lk)
      logit = (k.to(dtype) * gate_weight_.to(dtype).view({1, -1, 1, k.size(-1)})).sum(-1) + logit;
    else
      logit = logit.expand({1, gate_bias_.size(0), k.size(2)});
    return torch::log_sigmoid(logit).cumsum(-1);
  }

 private:
  bool content_gate_;
  double unscale_;
  torch::Tensor gate_weight_, gate_bias_;
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

SchemeInfo fox_scheme_info() {
  return {"fox",
          "the Forgetting Transformer's forget gate (Lin et al. 2025): the logit of query i for key j is lowered by "
          "the log forget gates -log sigmoid(w_h·k_t + b_h) of the tokens between them (to the left, the query's "
          "own included; to the right, the key's): a decay the content sets, no position ids",
          {{"gate",
            OptionKind::String,
            "content",
            "what sets each token's forget gate",
            0,
            0,
            {"content", "constant"},
            nullptr,
            {"sigmoid(w_h·k_t + b_h), from the head's key (the paper's gate reads the attention's input x_t; "
             "k_t = W_k x_t)",
             "sigmoid(b_h), one learned gate per head whatever the token (the paper's data-independent "
             "ablation: ALiBi with a learned slope -log sigmoid(b_h))"}},
           {"bias_init", OptionKind::Float, 0.0,
            "initial b_h of every head (0: gates of 1/2 at the start, as the paper's code; larger: slower "
            "forgetting)",
            -20.0, 20.0},
           {"init_std", OptionKind::Float, 0.02, "standard deviation of the initial w_h (gate content)", 0.0, 10.0}},
          Placement::EveryLayer,
          construct<FoxImpl>};
}

}  // namespace posenc
