// PaTH (Yang et al. 2025): the transformation between a query and a key is the
// product of one Householder-like matrix per token between them.
//
// Every token t has, per head, a unit vector w_t and a strength beta_t in (0, 2),
// and so H_t = I - beta_t w_t w_tᵀ: a reflection at beta = 2, a projection at 1,
// nearly the identity near 0. H_t sits on the step from token t-1 to token t; the
// logit of query i for key j is q_i carried over the steps between them, walked
// from the query to the key:
//
//   A_ij = q_iᵀ H_i H_{i-1} ... H_{j+1} k_j     for j <  i   (the paper, causal)
//   A_ii = q_iᵀ k_i
//   A_ij = q_iᵀ H_{i+1} H_{i+2} ... H_j k_j     for j >  i   (an encoder's keys to the right)
//
// H_t's eigenvalues are 1 and 1 - beta_t, both in (-1, 1], so no product grows a
// vector and |A_ij| <= |q_i| |k_j|. What two tokens' logit sees of their distance
// is what lies between them, not a count; RoPE's fixed rotations are a special
// case (a rotation is the product of two reflections). As with FoX (contextual.cpp)
// the step into a token to the left is the query's own, and to the right the
// key's, so an encoder can tell left from right.
//
// The paper reads w_t and beta_t from the attention's input x_t (w through a
// low-rank projection, a short convolution and an L2 norm; beta_t = 2 sigmoid of
// a linear function of x_t). Here, like FoX's gate, they read the head's key
// k_t = W_k x_t, which is what the score-term hook sees and what a KV cache keeps:
//
//   w_t = normalize(M_h k_t),   beta_t = 2 sigmoid(u_h·k_t + b_h),
//
// with M_h a learned Dh x Dh matrix per head, and no convolution.
//
// Computing every pair: the product of the H_t over a run of tokens, ordered as
// above, is I - Σ_{s,r} w_s T[s,r] beta_r w_rᵀ with T = (I + S)^-1 and
// S[s,r] = beta_s w_s·w_r for s > r (the UT transform of products of Householder
// matrices). T is lower triangular, and the diagonal block of T over a
// contiguous run is the T of that run, so one T per chunk of C tokens serves
// every pair inside the chunk; across chunks each query is carried back one
// chunk at a time through the chunk's Dh x Dh product. That costs
// O(L C² + L² Dh + L² Dh² / C) a head instead of a matrix product per pair.
#include <algorithm>

#include "posenc/positional/scheme.h"
#include "posenc/positional/builtin_schemes.h"
#include "posenc/util/batched_matmul.h"

namespace posenc {
namespace {

/// Tokens per chunk of the computation: the triangular solves grow as C³, the
/// carrying across chunks as L² / C.
constexpr int64_t kChunk = 32;

/// The causal logits A_ij (j <= i) of the header comment for the queries i >= first, zero right of
/// the diagonal. A KV cache's decoding step asks for the last row alone: only the chunks that hold
/// asked-for queries are carried, so a step costs O(L (C² + Dh²)) rather than the whole L x L.
/// q, k, w (B, H, L, D) and beta (B, H, L), all of one floating type. -> (B, H, L - first, L)
torch::Tensor causal_logits(torch::Tensor q, torch::Tensor k, torch::Tensor w, torch::Tensor beta, int64_t first) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3);
  const int64_t C = std::min(kChunk, L), N = (L + C - 1) / C, padded = N * C;
  if (padded > L) {  // tokens after the last one, with w = 0: H_t = I, and no real query reads them
    q = torch::constant_pad_nd(q, {0, 0, 0, padded - L});
    k = torch::constant_pad_nd(k, {0, 0, 0, padded - L});
    w = torch::constant_pad_nd(w, {0, 0, 0, padded - L});
    beta = torch::constant_pad_nd(beta, {0, padded - L});
  }
  auto chunked = [&](const torch::Tensor& x) { return x.reshape({B, H, N, C, D}); };
  auto qc = chunked(q), kc = chunked(k), wc = chunked(w);  // (B, H, N, C, D)
  auto wb = wc * beta.reshape({B, H, N, C, 1});            // beta_t w_t
  const auto bools = q.options().dtype(torch::kBool);
  const auto at_or_below = torch::ones({C, C}, bools).tril();  // [i, s]: s <= i
  const auto below = torch::ones({C, C}, bools).tril(-1);      // [r, j]: r > j
  const auto zero = torch::zeros({}, q.options());
  auto masked = [&](const torch::Tensor& x, const torch::Tensor& keep) { return torch::where(keep, x, zero); };
  auto t = [](const torch::Tensor& x) { return x.transpose(-1, -2); };

  // The query chunks asked for: a0..N-1 (Q of them), and of chunk a0 its rows from r0 on when it
  // is the only one (a decoding step); otherwise whole chunks, narrowed to the rows at the end.
  const int64_t a0 = first / C, Q = N - a0;
  const int64_t r0 = Q == 1 ? first - a0 * C : 0, R = C - r0;                                // R query rows a chunk
  auto asked = [&](const torch::Tensor& x) { return x.narrow(2, a0, Q).narrow(3, r0, R); };  // (B, H, Q, R, ...)

  // I + S of each chunk (unit lower triangular); T = (I + S)^-1 is only ever applied, by a solve.
  auto unit_lower = masked(batched_matmul(wb, t(wc)), below) + torch::eye(C, q.options());  // (B, H, N, C, C)
  auto apply_T = [&](const torch::Tensor& rhs) {
    return torch::linalg_solve_triangular(unit_lower, rhs, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  };
  auto own = [&](const torch::Tensor& x) { return x.narrow(2, a0, Q); };  // the asked-for queries' chunks
  const auto row_at_or_below = at_or_below.narrow(0, r0, R);              // [i, s]: s <= i, for the rows asked
  auto qa = asked(qc);                                                    // (B, H, Q, R, D)
  auto qw = masked(batched_matmul(qa, t(own(wc))), row_at_or_below);      // [i, s] = q_i·w_s for s <= i
  auto t_wbk = apply_T(masked(batched_matmul(wb, t(kc)), below));         // T · [r, j] = beta_r w_r·k_j for r > j
  auto t_wb = apply_T(wb);                                                // T diag(beta) W: (B, H, N, C, D)
  // Inside a chunk: q_iᵀ k_j less the sum over j < r <= s <= i, the run's product.
  auto local =
      masked(batched_matmul(qa, t(own(kc))), row_at_or_below) - batched_matmul(qw, own(t_wbk));  // (B, H, Q, R, C)
  auto rows = [&](const torch::Tensor& x) {  // (B, H, Q * R, padded) -> the rows asked for
    return x.narrow(2, first - a0 * C - r0, L - first).narrow(3, 0, L);
  };
  if (N == 1) return rows(local.reshape({B, H, R, padded}));

  // Across chunks. A query carried over the steps of its own chunk up to itself:
  // q̂_iᵀ = q_iᵀ H_i ... H_first; a key carried over those after it: k̂_j = H_last ... H_{j+1} k_j;
  // a row vector v over a whole chunk c: v - v W_cᵀ T_c diag(beta) W_c.
  auto q_hat = qa - batched_matmul(qw, own(t_wb));  // (B, H, Q, R, D)
  auto k_hat = kc - batched_matmul(t(t_wbk), wc);   // (B, H, N, C, D)
  auto through = batched_matmul(t(wc), t_wb);       // (B, H, N, D, D)
  // blocks[., ., x, ., c, .]: query chunk a0 + x against key chunk c. diagonal(a0 - d, 2, 4) of
  // blocks holds the pairs (a, a - d), as (B, H, R, C, pairs).
  auto blocks = torch::zeros({B, H, Q, R, N, C}, q.options());
  blocks.diagonal(a0, 2, 4).copy_(local.permute({0, 1, 3, 4, 2}));
  // The query chunks a >= max(a0, d) still have a key chunk at distance d; carried holds them,
  // each carried over the chunks between it and a - d.
  auto carried = a0 == 0 ? q_hat.narrow(2, 1, Q - 1) : q_hat;
  for (int64_t d = 1; d < N; ++d) {
    const int64_t lo = std::max(a0, d), n = N - lo;                       // pairs (a, a - d) for a = lo..N-1
    auto block = batched_matmul(carried, t(k_hat.narrow(2, lo - d, n)));  // (B, H, n, R, C)
    blocks.diagonal(a0 - d, 2, 4).copy_(block.permute({0, 1, 3, 4, 2}));
    if (d + 1 == N) break;
    carried = carried - batched_matmul(carried, through.narrow(2, lo - d, n));  // over chunk a - d
    if (d + 1 > a0) carried = carried.narrow(2, 1, n - 1);                      // chunk lo has no key chunk at d + 1
  }
  return rows(blocks.reshape({B, H, Q * R, padded}));
}

/// PaTH's logits as a score term (the header comment).
class PathImpl : public PositionalSchemeImpl {
 public:
  PathImpl(const SchemeContext& ctx, const SchemeOptions& o) : PositionalSchemeImpl("path"), causal_(ctx.causal) {
    const int64_t H = ctx.heads, Dh = ctx.head_dim;
    // M_h starts random, so that w_t is not k_t's own direction: the paper's w has a projection of its own.
    transform_ = register_parameter("transform", torch::randn({H, Dh, Dh}) / std::sqrt(double(Dh)));
    beta_weight_ = register_parameter("beta_weight", torch::randn({H, Dh}) * o.get_float("init_std"));
    beta_bias_ = register_parameter("beta_bias", torch::full({H}, o.get_float("beta_bias_init")));
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.score_terms = true;
    return c;
  }
  bool directional() const override { return true; }
  bool offset_only() const override { return false; }
  bool self_attention_only() const override { return true; }
  double attention_flops(int64_t B, int64_t H, int64_t /*Lq*/, int64_t Lk, int64_t Dh) const override {
    const double C = double(std::min(kChunk, Lk)), N = std::ceil(double(Lk) / C), D = double(Dh);
    const double inside = N * (6 * C * C * D + 1.5 * C * C * C + 0.5 * C * C * D + C * D * D);
    const double across = N * (N - 1) / 2 * (C * C * D + C * D * D);
    const double setup = Lk * D * D + Lk * D;  // M_h k_t and u_h·k_t
    return 2.0 * B * H * ((causal_ ? 1 : 2) * (inside + across) + setup);
  }

  torch::Tensor score_terms(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& qk,
                            const Positions& /*pos*/) override {
    const int64_t Lq = q.size(2), Lk = k.size(2);
    TORCH_CHECK(Lq <= Lk, "path carries a query over the keys of its own sequence: self-attention only, got ", Lq,
                " queries and ", Lk, " keys");
    // float32 at least: the solves and the subtraction below are not for bf16.
    const auto dtype = torch::promote_types(k.scalar_type(), torch::kFloat32);
    auto keys = k.to(dtype);
    auto queries = q.to(dtype);  // the last Lq of the Lk tokens (a KV cache's new ones)
    if (Lq < Lk) queries = torch::constant_pad_nd(queries, {0, 0, Lk - Lq, 0});
    auto w = torch::matmul(keys, transform_.to(dtype).transpose(-1, -2).unsqueeze(0));  // (B, H, Lk, Dh)
    w = w / w.norm(2, -1, true).clamp_min(1e-6);
    auto beta = 2 * torch::sigmoid((keys * beta_weight_.to(dtype).view({1, -1, 1, k.size(-1)})).sum(-1) +
                                   beta_bias_.to(dtype).view({1, -1, 1}));       // (B, H, Lk)
    auto logits = causal_logits(queries, keys, w, beta, causal_ ? Lk - Lq : 0);  // (B, H, Lq or Lk, Lk)
    if (!causal_) {
      // Keys to the right: the causal logits of the reversed sequence, whose step into reversed
      // token u is the original step into token Lk - u (w and beta shifted by one; u = 0 is never read).
      auto reversed = [&](const torch::Tensor& x) { return x.flip({2}); };
      auto shifted = [&](const torch::Tensor& x, std::vector<int64_t> pad) {
        return torch::constant_pad_nd(reversed(x).narrow(2, 0, Lk - 1), pad);
      };
      auto right = causal_logits(reversed(queries), reversed(keys), shifted(w, {0, 0, 1, 0}), shifted(beta, {1, 0}), 0);
      logits = (logits + right.flip({2, 3}).triu(1)).narrow(2, Lk - Lq, Lq);
    }
    // The term is PaTH's logit less the plain q·k that attention adds it to (attention's own, where it
    // passes it). A decoder's keys right of a query are masked: its term there is 0.
    auto plain = qk.defined() ? qk.to(dtype) : batched_matmul(q.to(dtype), keys.transpose(-1, -2));  // (B, H, Lq, Lk)
    if (causal_) plain = plain.tril(Lk - Lq);
    return (logits - plain).to(q.scalar_type());
  }

 private:
  bool causal_;
  torch::Tensor transform_, beta_weight_, beta_bias_;
};

}  // namespace

SchemeInfo path_scheme_info() {
  return {"path",
          "PaTH (Yang et al. 2025): the logit of query i for key j is q_i carried to key j through "
          "H_t = I - beta_t w_t w_tᵀ of every token t between them, w_t = normalize(M_h k_t) and "
          "beta_t = 2 sigmoid(u_h·k_t + b_h) read from each token's key: a data-dependent, multiplicative "
          "position, no position ids",
          {{"beta_bias_init", OptionKind::Float, 0.0,
            "initial b_h of every head (0: beta = 1 at the start, a projection; large: reflections, beta -> 2; "
            "very negative: H_t -> I, no positions)",
            -20.0, 20.0},
           {"init_std", OptionKind::Float, 0.02, "standard deviation of the initial u_h", 0.0, 10.0}},
          Placement::EveryLayer,
          construct<PathImpl>};
}

}  // namespace posenc
