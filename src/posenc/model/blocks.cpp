#include "posenc/model/blocks.h"
#include "posenc/util/linear.h"

namespace posenc {
namespace {
torch::nn::LayerNorm layer_norm(int64_t d_model) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model}));
}
}  // namespace

BlockImpl::BlockImpl(const BlockOptions& o) {
  ln1_ = register_module("ln1", layer_norm(o.d_model()));
  attention = register_module("attention", MultiHeadAttention(MultiHeadAttentionOptions(o.d_model(), o.heads())
                                                                  .dropout(o.dropout())
                                                                  .project_input(o.project_input())
                                                                  .causal(o.causal())
                                                                  .length_factors(o.length_factors())
                                                                  .stick_breaking(o.stick_breaking())
                                                                  .window(o.window())
                                                                  .qk_norm(o.qk_norm())
                                                                  .qk_norm_whole_width(o.qk_norm_whole_width())));
  ln2_ = register_module("ln2", layer_norm(o.d_model()));
  ff1_ = register_module("ff1", torch::nn::Linear(o.d_model(), o.d_ff()));
  ff2_ = register_module("ff2", torch::nn::Linear(o.d_ff(), o.d_model()));
  drop_ = register_module("drop", torch::nn::Dropout(o.dropout()));
}

torch::Tensor BlockImpl::feed_forward(const torch::Tensor& h) {
  return h + drop_->forward(linear(ff2_, torch::gelu(linear(ff1_, ln2_->forward(h)))));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, PositionalSchemeImpl* scheme, const Positions& pos,
                                 LayerCache* cache) {
  auto h = x + drop_->forward(attention->forward(ln1_->forward(x), scheme, pos, cache));  // (B, L, D)
  return feed_forward(h);
}

torch::Tensor BlockImpl::forward_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     PositionalSchemeImpl* scheme, const Positions& pos, LayerCache* cache) {
  auto h = v + drop_->forward(attention->attend(q, k, v, scheme, pos, cache));  // (B, L, D)
  return feed_forward(h);
}

DecoderBlockImpl::DecoderBlockImpl(const BlockOptions& o) {
  const int64_t D = o.d_model();
  const auto attention = MultiHeadAttentionOptions(D, o.heads())
                             .dropout(o.dropout())
                             .length_factors(o.length_factors())
                             .qk_norm(o.qk_norm())
                             .qk_norm_whole_width(o.qk_norm_whole_width());
  ln1_ = register_module("ln1", layer_norm(D));
  self_attention = register_module(
      "attention", MultiHeadAttention(MultiHeadAttentionOptions(attention).causal(true).window(o.window())));
  ln_cross_ = register_module("ln_cross", layer_norm(D));
  cross_q_ = register_module("cross_q", torch::nn::Linear(D, D));
  cross_kv_ = register_module("cross_kv", torch::nn::Linear(D, 2 * D));
  cross_attention =
      register_module("cross_attention", MultiHeadAttention(MultiHeadAttentionOptions(attention).project_input(false)));
  ln2_ = register_module("ln2", layer_norm(D));
  ff1_ = register_module("ff1", torch::nn::Linear(D, o.d_ff()));
  ff2_ = register_module("ff2", torch::nn::Linear(o.d_ff(), D));
  drop_ = register_module("drop", torch::nn::Dropout(o.dropout()));
}

LayerCache DecoderBlockImpl::cross_keys_values(const torch::Tensor& memory) {
  auto kv = linear(cross_kv_, memory).chunk(2, /*dim=*/-1);  // 2 x (B, S, D)
  return {kv[0], kv[1]};
}

torch::Tensor DecoderBlockImpl::forward(const torch::Tensor& x, PositionalSchemeImpl* scheme, const Positions& pos,
                                        LayerCache* cache, const LayerCache& cross, PositionalSchemeImpl* cross_scheme,
                                        const Positions& cross_pos) {
  auto h = x + drop_->forward(self_attention->forward(ln1_->forward(x), scheme, pos, cache));  // (B, A, D)
  auto q = linear(cross_q_, ln_cross_->forward(h));                                            // (B, A, D)
  h = h + drop_->forward(cross_attention->attend(q, cross.k, cross.v, cross_scheme, cross_pos));
  return h + drop_->forward(linear(ff2_, torch::gelu(linear(ff1_, ln2_->forward(h)))));
}

}  // namespace posenc
