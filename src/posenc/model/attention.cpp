#include "posenc/model/attention.h"
#include "posenc/compat.h"
#include "posenc/model/batched_matmul.h"
#include "posenc/model/linear.h"

#include <cmath>

namespace posenc {

MultiHeadAttentionImpl::MultiHeadAttentionImpl(int64_t d_model, int64_t heads, double dropout, bool project_input)
    : d_model_(d_model), heads_(heads), head_dim_(d_model / heads), dropout_(dropout) {
  TORCH_CHECK(d_model % heads == 0, "d_model ", d_model, " is not divisible by heads ", heads);
  if (project_input) qkv_ = register_module("qkv", torch::nn::Linear(d_model, 3 * d_model));
  out_ = register_module("out", torch::nn::Linear(d_model, d_model));
  attn_drop_ = register_module("attn_drop", torch::nn::Dropout(dropout));
}

torch::Tensor MultiHeadAttentionImpl::split_heads(const torch::Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads_, head_dim_}).transpose(1, 2);  // (B, H, L, Dh)
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x, PositionalSchemeImpl* scheme,
                                              const Positions& pos) {
  TORCH_CHECK(!qkv_.is_empty(), "attention built without a projection: call attend(q, k, v)");
  auto qkv = linear(qkv_, x).chunk(3, /*dim=*/-1);  // 3 x (B, L, D)
  return attend(qkv[0], qkv[1], qkv[2], scheme, pos);
}

torch::Tensor MultiHeadAttentionImpl::attend(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                             const torch::Tensor& v_in, PositionalSchemeImpl* scheme,
                                             const Positions& pos) {
  const int64_t B = q_in.size(0), L = q_in.size(1);
  auto q = split_heads(q_in), k = split_heads(k_in), v = split_heads(v_in);  // (B, H, L, Dh)
  const Capabilities caps = scheme ? scheme->capabilities() : Capabilities{};
  if (caps.rotate) scheme->rotate(q, k, pos);
  torch::Tensor bias = caps.bias ? scheme->bias(pos) : torch::Tensor();  // (1|B, H, L, L)

  torch::Tensor ctx;  // (B, H, L, Dh)
  if (compat::kHasSdpa && caps.fits_fused_attention() && !keep_weights_ && !force_explicit_) {
    // Fused kernel; the bias becomes an additive float mask in the query dtype.
    ctx = compat::scaled_dot_product_attention(q, k, v, bias.defined() ? bias.to(q.scalar_type()) : bias,
                                               is_training() ? dropout_ : 0.0);
  }
  if (!ctx.defined()) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    auto scores = batched_matmul(q, k.transpose(-2, -1));  // (B, H, L, L)
    if (caps.score_terms) scores = scores + scheme->score_terms(q, k, scores, pos);
    scores = scores * scale;
    if (bias.defined()) scores = scores + bias;
    if (caps.reweight) scores = scheme->reweight(scores, pos);
    auto probs = torch::softmax(scores, /*dim=*/-1);  // (B, H, L, L)
    if (keep_weights_) last_weights_ = probs.detach();
    auto dropped = attn_drop_->forward(probs);
    ctx = batched_matmul(dropped, v);  // (B, H, L, Dh)
    if (caps.value_terms) ctx = ctx + scheme->value_terms(dropped, pos);
  }
  ctx = ctx.transpose(1, 2).reshape({B, L, d_model_});  // (B, L, D)
  return linear(out_, ctx);
}

}  // namespace posenc
