// Stick-breaking attention (model.attention.weights = stick_breaking, Tan et al.
// 2024): its weights against the rule computed key by key in float64, with and
// without a scheme's bias; the property that makes it extrapolate (a query's
// weights on its nearest keys do not change when more keys lie further back);
// a decoder's KV cache against its whole-sequence forward; the config's
// refusals; and a decoder that learns with it.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_helpers.h"
#include "helpers.h"
#include "length_factor_checks.h"
#include "posenc/model/attention.h"
#include "posenc/model/decoder.h"
#include "reliability_helpers.h"
#include "tolerances.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

constexpr int64_t kHeads = 2, kDh = 4, kD = kHeads * kDh;

/// Causal stick-breaking attention fed q, k, v directly, in float64, keeping its weights.
MultiHeadAttention stick_breaking_attention() {
  return posenc::testing::float64_attention(MultiHeadAttentionOptions(kD, kHeads).causal(true).stick_breaking(true));
}

/// The weights (H, L, L) of stick-breaking over logits z (H, L, L), written as
/// the rule reads: going back from query i, key j takes beta_ij = sigmoid(z_ij)
/// of the weight still left, and the query's own value takes what is left at the
/// start of the sequence. A loop, not the module's cumulative sums.
torch::Tensor stick_breaking_by_hand(const torch::Tensor& z) {
  const int64_t H = z.size(0), L = z.size(1);
  auto w = torch::zeros({H, L, L}, torch::kFloat64);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i) {
      double left = 1.0;
      for (int64_t j = i - 1; j >= 0; --j) {
        const double beta = 1.0 / (1.0 + std::exp(-z[h][i][j].item<double>()));
        w[h][i][j] = left * beta;
        left *= 1.0 - beta;
      }
      w[h][i][i] = left;
    }
  return w;
}

}  // namespace

TEST(StickBreaking, WeightsFollowTheRuleKeyByKeyWithAndWithoutABias) {
  const int64_t L = 10;
  torch::manual_seed(1);
  auto attention = stick_breaking_attention();
  // Logits of about +-4, so that some keys take most of what is left and some almost nothing.
  const auto q = 2 * torch::randn({1, L, kD}, torch::kFloat64), k = 2 * torch::randn({1, L, kD}, torch::kFloat64);
  const auto v = torch::randn({1, L, kD}, torch::kFloat64);
  const auto pos = posenc::testing::arange_positions(L);
  torch::NoGradGuard no_grad;

  attention->attend(q, k, v, nullptr, pos);
  auto w = attention->last_weights()[0];  // (H, L, L)
  EXPECT_TRUE(torch::allclose(w, stick_breaking_by_hand(posenc::testing::per_head_logits(q, k, kHeads)), 0.0,
                              tolerance::kFloat64));
  EXPECT_TRUE(torch::allclose(w.sum(-1), torch::ones({kHeads, L}, torch::kFloat64)));  // every row sums to 1
  EXPECT_EQ(w.triu(1).abs().sum().item<double>(), 0.0);                                // nothing right of the query
  EXPECT_EQ(w[0][0][0].item<double>(), 1.0);  // the first query has only its own value

  // A scheme's bias enters the logits before the weights are taken (ALiBi's slopes here).
  auto alibi = posenc::testing::scheme_with("alibi", {kD, kHeads, kDh, 0, true});
  alibi->to(torch::kFloat64);
  attention->attend(q, k, v, alibi.get(), pos);
  const auto biased =
      posenc::testing::per_head_logits(q, k, kHeads) + alibi->bias(pos).to(torch::kFloat64).view({kHeads, L, L});
  EXPECT_TRUE(torch::allclose(attention->last_weights()[0], stick_breaking_by_hand(biased), 0.0, tolerance::kFloat64));
}

TEST(StickBreaking, WeightsOnTheNearestKeysDoNotDependOnHowManyKeysLieFurtherBack) {
  // The last query's weights on its 6 nearest keys, alone and with 20 more keys
  // in front: the same, as the rule hands out weight nearest first. (A
  // softmax's would shrink: its denominator sums over every key.)
  const int64_t near = 6, far = 20;
  torch::manual_seed(2);
  auto attention = stick_breaking_attention();
  const auto q = torch::randn({1, far + near, kD}, torch::kFloat64),
             k = torch::randn({1, far + near, kD}, torch::kFloat64);
  const auto v = torch::randn({1, far + near, kD}, torch::kFloat64);
  torch::NoGradGuard no_grad;
  attention->attend(q, k, v, nullptr, posenc::testing::arange_positions(far + near));
  const auto long_row = attention->last_weights()[0].select(1, far + near - 1);  // (H, far + near)
  const auto tail = [&](const torch::Tensor& x) { return x.narrow(1, far, near); };
  attention->attend(tail(q), tail(k), tail(v), nullptr, posenc::testing::arange_positions(near));
  const auto short_row = attention->last_weights()[0].select(1, near - 1);  // (H, near)
  // Every earlier key keeps its weight; the query's own value, which takes what is left, gets what the far
  // keys take less.
  EXPECT_TRUE(
      torch::allclose(long_row.narrow(1, far, near - 1), short_row.narrow(1, 0, near - 1), 0.0, tolerance::kFloat64));
  const auto far_share = long_row.narrow(1, 0, far).sum(1);  // (H)
  EXPECT_TRUE(far_share.gt(1e-6).all().item<bool>());
  EXPECT_TRUE(torch::allclose(long_row.select(1, far + near - 1) + far_share, short_row.select(1, near - 1), 0.0,
                              tolerance::kFloat64));
}

TEST(StickBreaking, KvCacheGivesTheWholeSequencesLogits) {
  for (const char* scheme : {"none", "rope", "alibi"}) {
    auto model = posenc::testing::random_positional_model<Decoder>(
        posenc::testing::small_next_token_config("decoder", scheme, {"model.attention.weights=stick_breaking"}).model,
        3);
    posenc::testing::expect_cache_and_fused_match_explicit(model, scheme);
  }
}

TEST(StickBreaking, OnlyADecoderTakesIt) {
  for (const char* kind : {"encoder", "encoder_decoder"}) {
    const std::string error =
        posenc::testing::config_error({std::string("model.kind=") + kind, "model.attention.weights=stick_breaking"});
    EXPECT_NE(error.find("model.attention.weights"), std::string::npos) << error;
    EXPECT_NE(error.find("causal"), std::string::npos) << error;
  }
  EXPECT_NE(posenc::testing::config_error({"model.attention.weights=sparsemax"}).find("softmax, stick_breaking"),
            std::string::npos);
}

TEST(StickBreaking, ADecoderWithoutPositionsLearnsToCopy) {
  // A NoPE copy decoder trained briefly with stick-breaking weights. Measured token
  // accuracy at length 6 (600 answer tokens): 0.767, exact match 0.47; with the
  // softmax the same run reaches 0.627 and 0.20. Chance is 1/16 a token.
  posenc::testing::Scratch s("stick_breaking");
  const std::string run = s.path("run");
  auto r = posenc::testing::train_shipped(
      "copy.json", run,
      "--set train.steps=800 --set task.min_length=3 --set task.max_length=6 --set model.positional.type=none "
      "--set model.attention.weights=stick_breaking --set eval.lengths=[6] --set eval.samples_per_length=100 "
      "--set train.val_samples=16 --set model.d_model=32 --set model.d_ff=64");
  ASSERT_EQ(r.code, 0) << r.output;
  const json results = read_json_file(run + "/results.json");
  EXPECT_EQ(results["config"]["model"]["attention"]["weights"], "stick_breaking");
  EXPECT_GT(results["lengths"][0]["token_accuracy"].get<double>(), 0.5) << r.output;

  // `posenc heads` reads the weights the model attends with: each query's on
  // the keys left of it and on itself sum to 1, and none lie right of it.
  auto h = posenc::testing::run_cli("heads " + run + "/checkpoint.pt --lengths 6 --samples 20 --json " +
                                    s.path("heads.json"));
  ASSERT_EQ(h.code, 0) << h.output;
  EXPECT_NE(h.output.find("with stick_breaking weights"), std::string::npos) << h.output;
  const json heads = read_json_file(s.path("heads.json"));
  EXPECT_EQ(heads["weights"], "stick_breaking");
  int checked = 0;
  for (const auto& block : heads["lengths"][0]["blocks"])
    for (const auto& head : block["heads"]) {
      EXPECT_NEAR(head["left"].get<double>() + head["self"].get<double>(), 1.0, 1e-5) << block["block"];
      EXPECT_EQ(head["right"].get<double>(), 0.0) << block["block"];
      ++checked;
    }
  EXPECT_EQ(checked, 3 * 4);  // 3 blocks of 4 heads
}

}  // namespace POSENC_TEST_UNIT
