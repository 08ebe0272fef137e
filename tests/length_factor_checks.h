// Shared by the tests of the factors on attention's logits (Scalable-Softmax,
// LogN scaling, the head scale, the fixed logit scale): causal weights against
// a float64 softmax of the scaled logits, and a decoder's KV cache and fused
// path against its explicit whole-sequence forward.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "helpers.h"
#include "posenc/compat.h"
#include "posenc/model/attention.h"
#include "posenc/model/decoder.h"

namespace posenc::testing {

/// weights (1, H, L, L) of causal attention on q, k (1, L, H * Dh) with `bias`
/// (H, L, L) must be softmax_j(factor(h, i) (q_i.k_j / sqrt(Dh) + b_ij)) over
/// the keys j <= i, and 0 right of the query; computed here in float64.
inline void expect_scaled_causal_weights(const torch::Tensor& weights, const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& bias, int64_t H,
                                         const std::function<double(int64_t h, int64_t i)>& factor) {
  const int64_t L = q.size(1), Dh = q.size(2) / H;
  const auto w = weights.to(torch::kFloat64);
  const auto qh = q.view({L, H, Dh}).transpose(0, 1).to(torch::kFloat64);  // (H, L, Dh)
  const auto kh = k.view({L, H, Dh}).transpose(0, 1).to(torch::kFloat64);
  const auto z = torch::matmul(qh, kh.transpose(1, 2)) / std::sqrt(static_cast<double>(Dh)) +
                 bias.to(torch::kFloat64).view({H, L, L});  // (H, L, L)
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i) {
      const auto expected = torch::softmax(z[h][i].narrow(0, 0, i + 1) * factor(h, i), 0);
      const auto got = w[0][h][i];
      EXPECT_TRUE(torch::allclose(got.narrow(0, 0, i + 1), expected, tolerance::kFloat32Sum, tolerance::kFloat32Sum))
          << "head " << h << " query " << i;
      EXPECT_EQ(got.narrow(0, i + 1, L - i - 1).abs().sum().item<double>(), 0.0) << "a key right of query " << i;
    }
}

/// `attention` (causal, fed q, k, v of width H * Dh directly) run on random
/// q, k, v of 12 positions with ALiBi's bias, on its explicit path: its
/// weights must be the softmax of the logits times factor(h, i).
inline void expect_alibi_attention_scaled(MultiHeadAttention& attention, int64_t H, int64_t Dh,
                                          const std::function<double(int64_t h, int64_t i)>& factor) {
  const int64_t L = 12, D = H * Dh;
  attention->eval();
  attention->keep_weights(true);  // the explicit path, which keeps its weights
  auto alibi = scheme_with("alibi", {D, H, Dh, 0, true});
  const auto pos = arange_positions(L);
  const auto q = torch::randn({1, L, D}), k = torch::randn({1, L, D}), v = torch::randn({1, L, D});
  torch::NoGradGuard no_grad;
  attention->attend(q, k, v, alibi.get(), pos);
  expect_scaled_causal_weights(attention->last_weights(), q, k, alibi->bias(pos), H, factor);
}

/// The decoder's logits of 14 tokens decoded from its KV cache (5, then one
/// at a time), and from the fused path where LibTorch has it, equal its
/// explicit whole-sequence forward: a factor counted per query must count the
/// same keys in each. A scheme without a KV cache (decoding reruns the whole
/// sequence: its encoding of a key depends on the sequence's length, or it
/// counts over the whole sequence) is checked on the fused path only.
inline void expect_cache_and_fused_match_explicit(Decoder& model, const std::string& what) {
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(1, 17, {2, 14}, torch::kLong);
  model->force_explicit_attention(true);
  const auto whole = model->forward(tokens);  // (2, 14, 18)
  if (model->supports_kv_cache()) {
    KVCache cache;
    std::vector<torch::Tensor> steps = {model->decode(tokens.narrow(1, 0, 5), cache)};
    for (int64_t t = 5; t < 14; ++t) steps.push_back(model->decode(tokens.narrow(1, t, 1), cache));
    const auto cached = torch::cat(steps, 1);
    EXPECT_TRUE(torch::allclose(cached, whole, tolerance::kFloat32Model, tolerance::kFloat32Model))
        << what << ": " << (cached - whole).abs().max().item<double>();
  }
  if (compat::kHasSdpa) {
    model->force_explicit_attention(false);
    const auto fused = model->forward(tokens);
    EXPECT_TRUE(torch::allclose(fused, whole, tolerance::kFloat32Model, tolerance::kFloat32Model))
        << what << ": " << (fused - whole).abs().max().item<double>();
  }
}

}  // namespace posenc::testing
