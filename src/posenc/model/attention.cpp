#include "posenc/model/attention.h"
#include "posenc/compat.h"
#include "posenc/util/batched_matmul.h"
#include "posenc/util/linear.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "posenc/positional/relative_offsets.h"

namespace posenc {

void LayerCache::append(const torch::Tensor& k_new, const torch::Tensor& v_new) {
  const int64_t held = k.defined() ? k.size(2) : 0, n = k_new.size(2);
  if (torch::GradMode::is_enabled()) {
    k = held > 0 ? torch::cat({k, k_new}, /*dim=*/2) : k_new;
    v = held > 0 ? torch::cat({v, v_new}, /*dim=*/2) : v_new;
    k_buffer = v_buffer = torch::Tensor();
    return;
  }
  if (!k_buffer.defined() || k_buffer.size(2) < held + n) {
    // Room for as many positions again: a prompt of P tokens leaves room for
    // an answer of P, and every later growth doubles.
    const int64_t capacity = std::max<int64_t>(2 * (held + n), 16);
    const auto grow = [&](const torch::Tensor& kept, const torch::Tensor& like) {
      auto sizes = like.sizes().vec();
      sizes[2] = capacity;
      auto buffer = torch::empty(sizes, like.options());  // (B, H, capacity, Dh)
      if (held > 0) buffer.narrow(2, 0, held).copy_(kept);
      return buffer;
    };
    k_buffer = grow(k, k_new);
    v_buffer = grow(v, v_new);
  }
  k_buffer.narrow(2, held, n).copy_(k_new);
  v_buffer.narrow(2, held, n).copy_(v_new);
  k = k_buffer.narrow(2, 0, held + n);  // (B, H, held + n, Dh)
  v = v_buffer.narrow(2, 0, held + n);
}

void LayerCache::select_rows(const torch::Tensor& rows) {
  // The picked rows become new tensors; the next append gives them buffers again.
  if (k.defined()) k = k.index_select(0, rows);
  if (v.defined()) v = v.index_select(0, rows);
  k_buffer = v_buffer = torch::Tensor();
}

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options)
    : d_model_(options.d_model()),
      heads_(options.heads()),
      head_dim_(options.d_model() / options.heads()),
      dropout_(options.dropout()),
      causal_(options.causal()),
      stick_breaking_(options.stick_breaking()),
      window_(options.window()) {
  TORCH_CHECK(d_model_ % heads_ == 0, "d_model ", d_model_, " is not divisible by heads ", heads_);
  TORCH_CHECK(!stick_breaking_ || causal_, "stick-breaking attention needs causal self-attention");
  TORCH_CHECK(window_ >= 0, "the attention window is 0 (off) or a number of tokens, not ", window_);
  if (options.project_input()) qkv_ = register_module("qkv", torch::nn::Linear(d_model_, 3 * d_model_));
  out_ = register_module("out", torch::nn::Linear(d_model_, d_model_));
  attn_drop_ = register_module("attn_drop", torch::nn::Dropout(dropout_));
  const LengthFactors& factors = options.length_factors();
  if (factors.log_length_scale > 0)
    length_scale_ = register_parameter("length_scale", torch::full({heads_}, factors.log_length_scale));
  TORCH_CHECK(factors.logn_from == 0 || factors.logn_from >= 2, "logn_from is 0 (off) or at least 2, not ",
              factors.logn_from);
  logn_from_ = factors.logn_from;
  TORCH_CHECK(factors.temperature_from >= 0 && factors.temperature_beta > 0,
              "temperature_from is 0 (off) or at least 1, and temperature_beta positive, not ",
              factors.temperature_from, " and ", factors.temperature_beta);
  temperature_from_ = factors.temperature_from;
  temperature_beta_ = factors.temperature_beta;
  TORCH_CHECK(factors.logit_scale > 0, "logit_scale is positive, not ", factors.logit_scale);
  logit_scale_ = factors.logit_scale;
  if (factors.head_scale) head_scale_ = register_parameter("head_scale", torch::ones({heads_}));
  if (options.qk_norm()) {
    // Per head: one gain per channel of a head, shared by the heads; over the whole width: one per channel.
    const int64_t channels = options.qk_norm_whole_width() ? d_model_ : head_dim_;
    q_gain_ = register_parameter("q_norm_gain", torch::ones({channels}));
    k_gain_ = register_parameter("k_norm_gain", torch::ones({channels}));
    qk_norm_whole_width_ = options.qk_norm_whole_width();
  }
}

torch::Tensor MultiHeadAttentionImpl::rms_normalized(const torch::Tensor& x, const torch::Tensor& gain) {
  // The mean of squares in float32 at least: under bf16 autocast, Dh squares summed in bf16 lose the 8th bit.
  const auto wide = x.scalar_type() == torch::kDouble ? x : x.to(torch::kFloat);  // (B, H, L, Dh) or (B, L, D)
  constexpr double kEps = 1e-6;  // against a zero vector; far below the mean square of any trained q or k
  const auto normalized = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + kEps);
  return (normalized * gain.to(wide.scalar_type())).to(x.scalar_type());
}

torch::Tensor MultiHeadAttentionImpl::length_factor(const torch::Tensor& mask, const torch::Tensor& k) const {
  torch::Tensor factor;  // (1|B, H|1, Lq|1, 1); undefined while every factor is off
  const auto times = [&](const torch::Tensor& f) { factor = factor.defined() ? factor * f : f; };
  if (length_scale_.defined() || logn_from_ > 0 || temperature_from_ > 0) {
    // n: the keys each query sees, after the causal mask and padding.
    const auto n = mask.defined()
                       ? mask.eq(0).sum(-1, /*keepdim=*/true).to(torch::kFloat).clamp_min(1)  // (1|B, 1, Lq, 1)
                       : torch::full({1, 1, 1, 1}, static_cast<double>(k.size(2)), k.options().dtype(torch::kFloat));
    if (length_scale_.defined()) times(length_scale_.view({1, heads_, 1, 1}) * n.log());  // (1|B, H, Lq|1, 1)
    if (logn_from_ > 0) {
      // Queries that see no more keys than training showed keep their logits: the factor is exactly 1 there
      // (not log N / log N, which float32 may round to just above 1).
      times(torch::where(n > static_cast<double>(logn_from_), n.log() / std::log(static_cast<double>(logn_from_)),
                         torch::ones_like(n)));  // (1|B, 1, Lq|1, 1)
    }
    if (temperature_from_ > 0) {
      // Llama 4's steps: exactly 1 below F keys, 1 + beta log 2 from F, 1 + beta log 3 from 2F, ... n and F are
      // whole numbers below 2^24, so float32's n / F is exact where the quotient is whole and stays below the
      // next whole number where it is not: the floor steps at exactly the right n.
      const auto steps = torch::floor(n / static_cast<double>(temperature_from_));  // (1|B, 1, Lq|1, 1)
      times(1.0 + temperature_beta_ * torch::log1p(steps));
    }
  }
  if (head_scale_.defined()) times(head_scale_.view({1, heads_, 1, 1}));  // (1, H, 1, 1): counts no keys
  if (logit_scale_ != 1.0) times(torch::full({1, 1, 1, 1}, logit_scale_, k.options().dtype(torch::kFloat)));
  return factor;
}

torch::Tensor MultiHeadAttentionImpl::stick_breaking_weights(const torch::Tensor& z, const torch::Tensor& blocked,
                                                             const torch::Tensor& own) {
  // In float32 at least: the log-weights sum up to Lk terms.
  const auto logits = z.scalar_type() == torch::kDouble ? z : z.to(torch::kFloat);
  const auto own_key = own.view({1, 1, own.size(0), own.size(1)});  // (1, 1, Lq, Lk)
  const auto out = blocked.logical_or(own_key);  // (1|B, 1, Lq, Lk): keys that take no share of their own
  // log beta_ij and log(1 - beta_ij); a key out of play takes nothing (log 0) and leaves everything (log 1).
  // Filled after the log-sigmoids, not fed -inf, so that no gradient is computed from an infinity.
  const auto log_share = torch::log_sigmoid(logits).masked_fill(out, -std::numeric_limits<double>::infinity());
  const auto log_left = torch::log_sigmoid(-logits).masked_fill(out, 0.0);  // (B, H, Lq, Lk)
  // sum over the keys k > j of log(1 - beta_ik): the reversed cumulative sum, less key j's own term. Keys
  // right of the query add 0, so this is the sum over the keys between j and the query.
  const auto through = log_left.flip(-1).cumsum(-1).flip(-1) - log_left;
  auto weights = (log_share + through).exp();  // (B, H, Lq, Lk): 0 on the keys out of play
  const auto rest = (1.0 - weights.sum(-1, /*keepdim=*/true)).clamp_min(0.0);  // (B, H, Lq, 1)
  weights = weights + rest * own_key.to(weights.scalar_type());
  return weights.to(z.scalar_type());
}

torch::Tensor MultiHeadAttentionImpl::token_distance(int64_t Lq, int64_t Lk, const torch::Device& device) {
  // The queries are the last Lq of the Lk tokens (all of them without a cache; the new ones with one).
  const auto slots = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto query_slot = torch::arange(Lk - Lq, Lk, slots).view({Lq, 1});
  return (query_slot - torch::arange(Lk, slots).view({1, Lk})).abs();  // (Lq, Lk)
}

torch::Tensor MultiHeadAttentionImpl::split_heads(const torch::Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads_, head_dim_}).transpose(1, 2);  // (B, H, L, Dh)
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x, PositionalSchemeImpl* scheme,
                                              const Positions& pos, LayerCache* cache) {
  TORCH_CHECK(!qkv_.is_empty(), "attention built without a projection: call attend(q, k, v)");
  auto qkv = linear(qkv_, x).chunk(3, /*dim=*/-1);  // 3 x (B, L, D)
  return attend(qkv[0], qkv[1], qkv[2], scheme, pos, cache);
}

torch::Tensor MultiHeadAttentionImpl::attend(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                             const torch::Tensor& v_in, PositionalSchemeImpl* scheme,
                                             const Positions& pos, LayerCache* cache) {
  const int64_t B = q_in.size(0), L = q_in.size(1);
  // QK-norm, before a scheme rotates or reads them; a cached key was normalized when new. Over the whole width
  // (B, L, D) before the heads split, or over each head's channels (B, H, L, Dh) after.
  const bool whole_width = q_gain_.defined() && qk_norm_whole_width_;
  auto q = split_heads(whole_width ? rms_normalized(q_in, q_gain_) : q_in);  // (B, H, L, Dh)
  auto k = split_heads(whole_width ? rms_normalized(k_in, k_gain_) : k_in);
  auto v = split_heads(v_in);
  if (q_gain_.defined() && !whole_width) {
    q = rms_normalized(q, q_gain_);
    k = rms_normalized(k, k_gain_);
  }
  const Capabilities caps = scheme ? scheme->capabilities() : Capabilities{};
  if (cache) {
    // The new keys sit at the queries' positions; earlier keys were rotated when they were new.
    Positions own = pos;
    own.k = pos.q;
    own.task_k = pos.task_q;  // undefined where the task defines no ids
    if (caps.rotate) scheme->rotate(q, k, own);
    cache->append(k, v);
    k = cache->k;  // (B, H, Lk, Dh)
    v = cache->v;
  } else if (caps.rotate) {
    scheme->rotate(q, k, pos);
  }
  torch::Tensor bias = caps.bias ? scheme->bias(pos) : torch::Tensor();  // (1|B, H, Lq, Lk)
  // (1, 1, Lq, Lk): -inf on the keys a query may not see (right of it, if causal; outside its window), else 0
  torch::Tensor mask;
  const int64_t Lq = q.size(2), Lk = k.size(2);
  if (causal_ || window_ > 0) {
    const auto make = [&] {
      torch::Tensor hidden;  // (Lq, Lk) bool
      if (causal_) hidden = relative_positions(pos.q, pos.k).gt(0);
      if (window_ > 0) {
        const auto far = token_distance(Lq, Lk, q.device()).ge(window_);  // (Lq, Lk)
        hidden = hidden.defined() ? hidden.logical_or(far) : far;
      }
      return torch::zeros(hidden.sizes(), q.options().dtype(torch::kFloat))
          .masked_fill(hidden, -std::numeric_limits<float>::infinity())
          .view({1, 1, Lq, Lk});
    };
    // One mask per forward, shared by every layer of the same window (the positions are the same).
    if (pos.cache == nullptr) {
      mask = make();
    } else {
      const std::string key =
          std::string(causal_ ? "causal" : "bidirectional") + "_mask_window_" + std::to_string(window_);
      auto it = pos.cache->find(key);
      mask = it != pos.cache->end() ? it->second : pos.cache->emplace(key, make()).first->second;
    }
  }

  if (pos.key_padding.defined()) {
    // (B, 1, 1, Lk): -inf at padding keys. Every row keeps at least one real key, but under a window a padding
    // query may see padding only: it keeps its own key, so that its row is not all -inf (a NaN that the values'
    // product would spread). No real query sees a padding key either way.
    auto padding = torch::zeros({B, 1, 1, pos.key_padding.size(1)}, q.options().dtype(torch::kFloat))
                       .masked_fill(pos.key_padding.view({B, 1, 1, -1}), -std::numeric_limits<float>::infinity());
    if (window_ > 0) padding = padding.masked_fill(token_distance(Lq, Lk, q.device()).eq(0).view({1, 1, Lq, Lk}), 0.0);
    mask = mask.defined() ? mask + padding : padding;  // (B, 1, Lq|1, Lk)
  }

  // Scalable-Softmax (s_h log n), LogN scaling (log n / log N past N), the head scale (lambda_h) and the fixed
  // logit scale (t): every logit of a query that sees n keys times the factor. The mask is added after it: a
  // query with one key has Scalable-Softmax's factor 0.
  const torch::Tensor factor = length_factor(mask, k);

  torch::Tensor ctx;  // (B, H, L, Dh)
  if (compat::kHasSdpa && caps.fits_fused_attention() && !stick_breaking_ && !keep_weights_ && !force_explicit_) {
    // Fused kernel; the bias becomes an additive float mask in the query dtype.
    // The factor scales q (so q·k) and the bias.
    if (factor.defined()) {
      q = q * factor.to(q.scalar_type());
      if (bias.defined()) bias = bias * factor;
    }
    torch::Tensor additive = bias.defined() && mask.defined() ? bias + mask : bias.defined() ? bias : mask;
    ctx = compat::scaled_dot_product_attention(q, k, v, additive.defined() ? additive.to(q.scalar_type()) : additive,
                                               is_training() ? dropout_ : 0.0);
  }
  if (!ctx.defined()) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    auto scores = batched_matmul(q, k.transpose(-2, -1));  // (B, H, Lq, Lk)
    // Outside grad mode nothing keeps the scores for backward, so float32
    // arithmetic on them is done in place: at long prompts every (B, H, Lq, Lk)
    // temporary is fresh memory. Not after reweight, whose result may not be ours.
    bool in_place = !torch::GradMode::is_enabled() && scores.scalar_type() == torch::kFloat;
    const auto plus = [&](const torch::Tensor& s, const torch::Tensor& t) { return in_place ? s.add_(t) : s + t; };
    const auto times = [&](const torch::Tensor& s, const torch::Tensor& t) { return in_place ? s.mul_(t) : s * t; };
    if (caps.score_terms) scores = plus(scores, scheme->score_terms(q, k, scores, pos));
    scores = in_place ? scores.mul_(scale) : scores * scale;
    if (bias.defined()) scores = plus(scores, bias);
    if (caps.reweight) {
      scores = scheme->reweight(scores, pos);
      in_place = false;
    }
    if (factor.defined()) scores = times(scores, factor);
    torch::Tensor probs;  // (B, H, Lq, Lk)
    if (stick_breaking_) {
      // Which key is whose: the causal mask and padding hide keys, and each query's own key takes the rest.
      const auto offsets = relative_positions(pos.q, pos.k);  // (Lq, Lk): key id - query id
      probs = stick_breaking_weights(scores, mask.isinf(), offsets.eq(0));
    } else {
      if (mask.defined()) scores = plus(scores, mask);  // after reweighting, which may scale the scores
      probs = torch::softmax(scores, /*dim=*/-1);
    }
    if (keep_weights_) {
      last_weights_ = probs.detach();
      last_factor_ = factor.defined() ? factor.detach() : torch::Tensor();
    }
    auto dropped = attn_drop_->forward(probs);
    ctx = batched_matmul(dropped, v);  // (B, H, L, Dh)
    if (caps.value_terms) ctx = ctx + scheme->value_terms(dropped, pos);
  }
  ctx = ctx.transpose(1, 2).reshape({B, L, d_model_});  // (B, Lq, D)
  return linear(out_, ctx);
}

}  // namespace posenc
