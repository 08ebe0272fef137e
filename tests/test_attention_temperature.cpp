// Llama 4's attention temperature (model.attention.temperature_from = F,
// temperature_beta = beta): the logits of a query that sees n keys times
// 1 + beta log(floor(n / F) + 1). Its formula against an independent
// computation (the steps at n = F, 2F, 3F included), the exact identity below
// F keys (what lets `posenc eval --set` turn it on for a trained model), the
// KV cache and the fused path agreeing with the explicit forward, alone, beside
// LogN and in the NoPE block only, the config that reaches it, and the shipped
// copy config that sets it.
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

namespace {

Config temperature_config(const std::string& scheme, int64_t from, std::vector<std::string> extra = {}) {
  extra.push_back("model.attention.temperature_from=" + std::to_string(from));
  if (from > 0) extra.push_back("model.attention.temperature_beta=0.6");
  return posenc::testing::small_next_token_config("decoder", scheme, extra);
}

}  // namespace

TEST(AttentionTemperature, WeightsAreTheSoftmaxOfTheLogitsTimesOnePlusBetaLogOfTheSteps) {
  // Causal attention with ALiBi's bias, F = 4, beta = 0.5: query i sees n_i = i + 1 keys (1..12, so the steps at
  // 4, 8 and 12 are crossed), and its weights must be softmax_j((1 + 0.5 log(floor(n_i / 4) + 1)) (q_i.k_j /
  // sqrt(Dh) + b_ij)), computed here in float64 with whole-number division.
  torch::manual_seed(0);
  const int64_t D = 16, H = 2, F = 4;
  LengthFactors factors;
  factors.temperature_from = F;
  factors.temperature_beta = 0.5;
  MultiHeadAttention attention(
      MultiHeadAttentionOptions(D, H).project_input(false).causal(true).length_factors(factors));
  posenc::testing::expect_alibi_attention_scaled(attention, H, D / H, [&](int64_t, int64_t i) {
    const int64_t steps = (i + 1) / F;
    return 1.0 + 0.5 * std::log(static_cast<double>(steps) + 1.0);
  });
}

TEST(AttentionTemperature, QueriesThatSeeFewerThanFKeysAreExactlyAsTrained) {
  // No parameter, so one seed builds the same weights with and without it: a decoder's queries that see fewer
  // than F keys give the same logits to the last bit (their factor is exactly 1); from the F-th on they differ.
  const int64_t F = 7;
  for (const char* scheme : {"none", "rope", "alibi"}) {
    auto with = posenc::testing::random_positional_model<Decoder>(temperature_config(scheme, F).model, 4);
    auto without = posenc::testing::random_positional_model<Decoder>(temperature_config(scheme, 0).model, 4);
    EXPECT_EQ(with->parameters().size(), without->parameters().size()) << scheme << ": it adds no parameter";
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(1, 17, {2, 20}, torch::kLong);
    const auto a = with->forward(tokens), b = without->forward(tokens);  // (2, 20, V)
    EXPECT_TRUE(torch::equal(a.narrow(1, 0, F - 1), b.narrow(1, 0, F - 1))) << scheme;
    EXPECT_FALSE(torch::allclose(a.narrow(1, F - 1, 20 - F + 1), b.narrow(1, F - 1, 20 - F + 1))) << scheme;
  }
}

TEST(AttentionTemperature, KvCacheAndTheFusedPathGiveTheExplicitWholeSequencesLogits) {
  // n is counted per query: a step from the cache takes the factor of its row of the whole sequence's mask.
  for (const char* scheme : {"none", "rope", "alibi"}) {
    auto model = posenc::testing::random_positional_model<Decoder>(temperature_config(scheme, 3).model, 2);
    posenc::testing::expect_cache_and_fused_match_explicit(model, scheme);
  }
  // Beside LogN the two factors multiply; and Llama 4's placement, the NoPE block only, with a window elsewhere.
  auto with_logn = posenc::testing::random_positional_model<Decoder>(
      temperature_config("rope", 3, {"model.attention.logn_from=5"}).model, 3);
  posenc::testing::expect_cache_and_fused_match_explicit(with_logn, "with LogN past 5");
  auto llama4 = posenc::testing::random_positional_model<Decoder>(
      temperature_config("rope", 3,
                         {"model.layers=3", "model.positional.nope_every=3", "model.attention.window=4",
                          "model.attention.qk_norm=true", "model.attention.length_scaling_in=\"nope_blocks\""})
          .model,
      4);
  posenc::testing::expect_cache_and_fused_match_explicit(llama4, "in the NoPE block only");
  torch::NoGradGuard no_grad;
  llama4->keep_attention(true);
  llama4->forward(torch::randint(1, 17, {1, 10}, torch::kLong));
  const auto factors = llama4->attention_logit_factors();
  ASSERT_EQ(factors.size(), 3U);
  EXPECT_FALSE(factors[0].defined());
  EXPECT_FALSE(factors[1].defined());
  ASSERT_TRUE(factors[2].defined());
  // Query 9 sees 10 keys: floor(10 / 3) = 3 steps.
  EXPECT_NEAR(factors[2].flatten()[9].item<double>(), 1.0 + 0.6 * std::log(4.0), tolerance::kFloat32Sum);
}

TEST(AttentionTemperature, TheConfigRefusesWhatChangesNothingAndEvalMayTurnItOn) {
  EXPECT_NE(posenc::testing::config_error({"model.attention.temperature_beta=0.3"})
                .find("temperature_beta: it is the beta of temperature_from, which is 0"),
            std::string::npos);
  EXPECT_NE(posenc::testing::config_error({"model.attention.temperature_from=-1"}).find("temperature_from"),
            std::string::npos);
  EXPECT_NE(posenc::testing::config_error({"model.attention.temperature_from=8", "model.attention.temperature_beta=0"})
                .find("temperature_beta"),
            std::string::npos);
  // A trained model may be read with it: it adds no parameter.
  const Config trained = temperature_config("rope", 0);
  const Config read = with_evaluation_changes(
      trained, {"model.attention.temperature_from=16", "model.attention.temperature_beta=0.25"});
  EXPECT_EQ(length_factors_of(read.model, 0).temperature_from, 16);
  EXPECT_EQ(length_factors_of(read.model, 0).temperature_beta, 0.25);
}

TEST(AttentionTemperature, TheShippedCopyConfigIsTheGridsQkNormRowWithItPastTheKeysTrainingShowed) {
  // configs/copy_hybrid_qk_norm_temperature.json trains what the rnope-swa-qkn row of
  // configs/copy_qk_norm_compare.json trained: a copy row of at most 16 input tokens gives a query at most 32 keys,
  // below F = 33, so the factor is exactly 1 for every training query and only evaluation past it differs, as
  // docs/results.md measured it.
  const Config shipped = posenc::testing::expect_shipped_config_trains_grid_row(
      "configs/copy_hybrid_qk_norm_temperature.json", "configs/copy_qk_norm_compare.json",
      "rnope-swa-qkn-projected-max-s0", [](const Config& shipped, Config& trained) {
        EXPECT_EQ(trained.model.temperature_from, 0);
        trained.model.temperature_from = shipped.model.temperature_from;
        trained.model.temperature_beta = shipped.model.temperature_beta;
        trained.model.length_scaling_in = shipped.model.length_scaling_in;
      });
  EXPECT_EQ(shipped.model.temperature_from, 2 * shipped.task.max_length + 1)
      << "one past the keys of a copy row's last query";
  EXPECT_EQ(shipped.model.length_scaling_in, LengthScalingIn::NopeBlocks);
  EXPECT_TRUE(shipped.model.qk_norm);
}

}  // namespace POSENC_TEST_UNIT
