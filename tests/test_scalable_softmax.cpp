// Scalable-Softmax (model.attention.log_length_scale, Nakanishi 2025): the
// logits of a query that sees n keys times s_h log n. Its formula against an
// independent computation, the property it exists for (attention on a key that
// stands out does not fade as n grows), n counted after the mask and padding,
// the fused path and the KV cache agreeing with the explicit whole-sequence
// forward, the option's parameters, and model.attention.length_scaling_in
// nope_blocks, which keeps it (and LogN) to the blocks without positions.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "length_factor_checks.h"
#include "posenc/compat.h"
#include "posenc/model/attention.h"
#include "posenc/model/decoder.h"
#include "posenc/model/transformer.h"
#include "posenc/train/evaluation_changes.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

namespace {

/// Attention fed q, k, v directly, with s_h set per head.
MultiHeadAttention scaled_attention(int64_t d_model, int64_t heads, bool causal, const std::vector<double>& s) {
  MultiHeadAttention attention(MultiHeadAttentionOptions(d_model, heads)
                                   .project_input(false)
                                   .causal(causal)
                                   .length_factors({/*log_length_scale=*/0.43, /*logn_from=*/0}));
  torch::NoGradGuard no_grad;
  attention->named_parameters()["length_scale"].copy_(torch::tensor(s, torch::kFloat));
  attention->eval();
  attention->keep_weights(true);  // the explicit path, which keeps its weights
  return attention;
}

Config decoder_config(const std::string& scheme, double s) {
  return posenc::testing::small_next_token_config("decoder", scheme,
                                                  {"model.attention.log_length_scale=" + std::to_string(s)});
}

}  // namespace

TEST(ScalableSoftmax, WeightsAreTheSoftmaxOfTheLogitsTimesSLogN) {
  // Causal attention with ALiBi's bias: query i sees n_i = i + 1 keys, and its
  // weights must be softmax_j(s_h log(n_i) (q_i.k_j / sqrt(Dh) + b_ij)),
  // computed here in float64 from the same q, k and bias.
  torch::manual_seed(0);
  const int64_t L = 7, D = 16, H = 2, Dh = D / H;
  const std::vector<double> s = {0.3, 0.9};
  auto attention = scaled_attention(D, H, /*causal=*/true, s);
  auto alibi = scheme_with("alibi", {D, H, Dh, 0, true});
  const auto pos = arange_positions(L);
  const auto q = torch::randn({1, L, D}), k = torch::randn({1, L, D}), v = torch::randn({1, L, D});
  torch::NoGradGuard no_grad;
  attention->attend(q, k, v, alibi.get(), pos);
  posenc::testing::expect_scaled_causal_weights(attention->last_weights(), q, k, alibi->bias(pos), H,
                                                [&](int64_t h, int64_t i) { return s[h] * std::log(i + 1.0); });
}

TEST(ScalableSoftmax, AttentionOnAKeyThatStandsOutDoesNotFadeAsKeysAreAdded) {
  // The paper's example: one key scores +3, the n - 1 others -2. Softmax gives
  // the first e^5 / (e^5 + n - 1), which falls towards 0 as n grows (0.37 at
  // n = 256); with s = 0.43 it is 1 / (1 + (n - 1) n^(-5 s)), which rises
  // towards 1 (0.998 at n = 256).
  const int64_t D = 4;
  auto attention = scaled_attention(D, 1, /*causal=*/false, {0.43});
  torch::NoGradGuard no_grad;
  const auto q = torch::tensor({2.0f, 0.0f, 0.0f, 0.0f}).view({1, 1, D});  // q.k / sqrt(4) = k_0
  double previous = 0.0;
  for (const int64_t n : {4, 16, 64, 256}) {
    auto k = torch::zeros({1, n, D});
    k.select(2, 0).fill_(-2.0f);
    k[0][0][0] = 3.0f;
    const auto v = torch::randn({1, n, D});
    attention->attend(q, k, v, nullptr, Positions{});
    const double top = attention->last_weights()[0][0][0][0].item<double>();
    const double n_d = static_cast<double>(n);
    EXPECT_NEAR(top, 1.0 / (1.0 + (n_d - 1.0) * std::pow(n_d, -5.0 * 0.43)), tolerance::kFloat32Sum) << n;
    EXPECT_GE(top, previous) << "fades at n = " << n;
    previous = top;
  }
  EXPECT_GT(previous, 0.99);
  EXPECT_LT(std::exp(5.0) / (std::exp(5.0) + 255.0), 0.4);  // what the plain softmax gives at 256
}

TEST(ScalableSoftmax, PaddingKeysAreNotCounted) {
  // A padded key gets no weight and does not count in n: the real keys'
  // weights are those of the same attention over the real keys alone.
  torch::manual_seed(1);
  const int64_t D = 8, H = 2, real = 5, padded = 9;
  auto attention = scaled_attention(D, H, /*causal=*/false, {0.5, 1.5});
  torch::NoGradGuard no_grad;
  const auto q = torch::randn({1, 3, D}), k = torch::randn({1, padded, D}), v = torch::randn({1, padded, D});
  Positions with_padding;
  with_padding.key_padding = torch::arange(padded).ge(real).view({1, padded});  // (1, Lk)
  attention->attend(q, k, v, nullptr, with_padding);
  const auto weights = attention->last_weights().narrow(3, 0, real).clone();
  attention->attend(q, k.narrow(1, 0, real), v.narrow(1, 0, real), nullptr, Positions{});
  EXPECT_TRUE(torch::allclose(weights, attention->last_weights(), tolerance::kFloat32Sum, tolerance::kFloat32Sum));
}

TEST(ScalableSoftmax, KvCacheAndTheFusedPathGiveTheExplicitWholeSequencesLogits) {
  // n is counted per query: a decoder step from the cache sees as many keys
  // as its row of the whole sequence's causal mask.
  for (const char* scheme : {"none", "rope", "alibi", "kerple"}) {
    auto model = posenc::testing::random_positional_model<Decoder>(decoder_config(scheme, 0.7).model, 2);
    posenc::testing::expect_cache_and_fused_match_explicit(model, scheme);
  }
  // The layout of configs/copy_hybrid_qk_norm_ssmax.json: RoPE windowed to 4 tokens in blocks 1-2, a NoPE
  // block 3, QK-norm; a windowed query's n stops at 4 keys, the NoPE block's grows.
  auto hybrid = posenc::testing::random_positional_model<Decoder>(
      posenc::testing::small_next_token_config(
          "decoder", "rope",
          {"model.attention.log_length_scale=0.7", "model.attention.window=4", "model.attention.qk_norm=true",
           "model.layers=3", "model.positional.nope_every=3"})
          .model,
      4);
  posenc::testing::expect_cache_and_fused_match_explicit(hybrid, "rope window 4, nope_every 3, QK-norm");
  // And the option is not a no-op: the same weights without it give other logits.
  auto with = posenc::testing::random_positional_model<Decoder>(decoder_config("alibi", 0.7).model, 3);
  auto without = posenc::testing::random_positional_model<Decoder>(decoder_config("alibi", 0.0).model, 3);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(1, 17, {2, 14}, torch::kLong);
  EXPECT_FALSE(torch::allclose(with->forward(tokens), without->forward(tokens), tolerance::kFloat32Model,
                               tolerance::kFloat32Model));
}

TEST(ScalableSoftmax, OnePerHeadScaleInEveryAttentionOnlyWhenOn) {
  // Off (the default, 0) adds no parameter, so earlier checkpoints load; on,
  // every attention (self and cross) learns one s_h per head, starting at s.
  for (const char* kind : {"decoder", "encoder_decoder"}) {
    auto count = [&](double s) {
      auto cfg = posenc::testing::small_next_token_config(kind, "alibi",
                                                          {"model.attention.log_length_scale=" + std::to_string(s)});
      Transformer model(cfg.model, 16);
      int64_t found = 0;
      for (const auto& p : model->named_parameters())
        if (p.key().find("length_scale") != std::string::npos) {
          EXPECT_EQ(p.value().numel(), cfg.model.heads) << p.key();
          EXPECT_TRUE(torch::allclose(p.value(), torch::full({cfg.model.heads}, s))) << p.key();
          ++found;
        }
      return found;
    };
    EXPECT_EQ(count(0.0), 0) << kind;
    // decoder: 2 self-attentions; encoder_decoder: 2 encoder + 2 decoder self + 2 cross.
    EXPECT_EQ(count(0.43), std::string(kind) == "decoder" ? 2 : 6) << kind;
  }
  EXPECT_NE(posenc::testing::config_error({"model.attention.log_length_scale=-0.5"}).find("log_length_scale"),
            std::string::npos);
}

TEST(ScalableSoftmax, NopeBlocksPutsTheLengthFactorsOnlyInTheBlocksWithoutPositions) {
  // The copy layout (RoPE windowed to 4 tokens in blocks 1-2, a NoPE block 3) with Scalable-Softmax and LogN past
  // 4 keys placed by length_scaling_in nope_blocks: block 3 alone learns s_h and scales its logits by
  // s_h log n max(1, log n / log 4); blocks 1-2 compute exactly what they compute without either factor.
  auto layout = [](const std::string& kind, bool scaled) {
    std::vector<std::string> o = {"model.layers=3", "model.positional.nope_every=3", "model.attention.window=4"};
    if (kind == "encoder_decoder") o.push_back("model.decoder_layers=3");
    if (scaled)
      for (const char* s : {"model.attention.log_length_scale=0.7", "model.attention.logn_from=4",
                            "model.attention.length_scaling_in=\"nope_blocks\""})
        o.push_back(s);
    return posenc::testing::small_next_token_config(kind, "rope", o).model;
  };
  for (const char* kind : {"decoder", "encoder_decoder"}) {
    std::vector<std::string> scales;
    for (const auto& p : Transformer(layout(kind, true), 16)->named_parameters())
      if (p.key().find("length_scale") != std::string::npos) scales.push_back(p.key());
    const std::vector<std::string> expected =
        std::string(kind) == "decoder"
            ? std::vector<std::string>{"blocks.2.attention.length_scale"}
            : std::vector<std::string>{"blocks.2.attention.length_scale", "decoder_blocks.2.attention.length_scale",
                                       "decoder_blocks.2.cross_attention.length_scale"};
    EXPECT_EQ(scales, expected) << kind;
  }

  auto scaled = posenc::testing::random_positional_model<Decoder>(layout("decoder", true), 5);
  auto plain = posenc::testing::random_positional_model<Decoder>(layout("decoder", false), 6);
  torch::NoGradGuard no_grad;
  const auto from = scaled->named_parameters();
  for (auto& p : plain->named_parameters()) p.value().copy_(from[p.key()]);
  const int64_t L = 14, H = 4;
  const auto tokens = torch::randint(1, 17, {1, L}, torch::kLong);
  scaled->keep_attention(true);
  plain->keep_attention(true);
  scaled->forward(tokens);
  plain->forward(tokens);
  const auto factors = scaled->attention_logit_factors();
  const auto maps = scaled->attention_maps(), plain_maps = plain->attention_maps();
  ASSERT_EQ(factors.size(), 3U);
  for (int64_t b : {0, 1}) {
    EXPECT_FALSE(factors[b].defined()) << "block " << b + 1 << " has a position scheme";
    EXPECT_TRUE(torch::equal(maps[b], plain_maps[b])) << "block " << b + 1;
  }
  ASSERT_TRUE(factors[2].defined());
  const auto s = from["blocks.2.attention.length_scale"].to(torch::kFloat64);  // (H)
  const auto log_n = torch::arange(1, L + 1, torch::kFloat64).log();           // query i sees i + 1 keys
  const auto logn = torch::clamp_min(log_n / std::log(4.0), 1.0);
  const auto expected_factor = (s.view({H, 1}) * (log_n * logn).view({1, L})).view({1, H, L, 1});
  EXPECT_TRUE(torch::allclose(factors[2].to(torch::kFloat64).expand({1, H, L, 1}), expected_factor, 1e-5, 0.0));
  EXPECT_FALSE(torch::allclose(maps[2], plain_maps[2], tolerance::kFloat32Sum, tolerance::kFloat32Sum));
  scaled->keep_attention(false);
  posenc::testing::expect_cache_and_fused_match_explicit(scaled, "length factors in the NoPE block only");

  // Refused where it would change nothing.
  EXPECT_NE(posenc::testing::config_error(
                {"model.attention.length_scaling_in=\"nope_blocks\"", "model.attention.logn_from=8"})
                .find("nope_every"),
            std::string::npos);
  EXPECT_NE(posenc::testing::config_error(
                {"model.attention.length_scaling_in=\"nope_blocks\"", "model.positional.nope_every=3"})
                .find("all three are 0"),
            std::string::npos);

  // A trained model may be read with it only where it removes no learned s_h: LogN alone is parameter-free.
  Config logn_everywhere = posenc::testing::small_next_token_config(
      "decoder", "rope", {"model.layers=3", "model.positional.nope_every=3", "model.attention.logn_from=4"});
  const Config read = with_evaluation_changes(logn_everywhere, {"model.attention.length_scaling_in=nope_blocks"});
  EXPECT_EQ(length_factors_of(read.model, 0).logn_from, 0);
  EXPECT_EQ(length_factors_of(read.model, 2).logn_from, 4);
  Config ssmax_everywhere = logn_everywhere;
  ssmax_everywhere.model.log_length_scale = 0.43;
  EXPECT_NE(posenc::testing::error_of([&] {
              with_evaluation_changes(ssmax_everywhere, {"model.attention.length_scaling_in=nope_blocks"});
            }).find("no parameter blocks.0.attention.length_scale"),
            std::string::npos);
}

TEST(ScalableSoftmax, TheShippedCopyConfigIsTheGridsQkNormRowWithItTrainedIn) {
  // configs/copy_hybrid_qk_norm_ssmax.json trains what the rnope-swa-qkn-ssmax row of
  // configs/copy_ssmax_compare.json trained, whose scores docs/results.md gives. Its LogN past 32 keys changes
  // no training query (inputs of at most 16 tokens: a query sees at most 32 keys), only evaluation past it.
  const Config shipped = posenc::testing::expect_shipped_config_trains_grid_row(
      "configs/copy_hybrid_qk_norm_ssmax.json", "configs/copy_ssmax_compare.json",
      "rnope-swa-qkn-ssmax-projected-max-s0", [](const Config& shipped, Config& trained) {
        EXPECT_EQ(trained.model.logn_from, 0);
        trained.model.logn_from = shipped.model.logn_from;
      });
  EXPECT_TRUE(shipped.model.qk_norm);
  EXPECT_GT(shipped.model.log_length_scale, 0.0);
  EXPECT_EQ(shipped.model.logn_from, 2 * shipped.task.max_length) << "the keys of a copy row's last query";
}

}  // namespace POSENC_TEST_UNIT
