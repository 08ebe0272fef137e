// Properties of the attention-time schemes, each against its definition:
// ALiBi slopes, the APE reference's 5x5 example, T5 buckets, Shaw clipping, the XL
// decomposition against its naive formula, DA's f(0) = 1, decay values.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "posenc/positional/relative.h"
#include "posenc/positional/tables.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

TEST(Alibi, SlopesForEightHeadsAreOneHalfToOne256th) {
  const auto s = alibi_slopes(8);
  ASSERT_EQ(s.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(s[h], std::pow(0.5, h + 1));
  for (int h = 1; h < 8; ++h) EXPECT_DOUBLE_EQ(s[h] / s[h - 1], 0.5);  // geometric
}

TEST(Alibi, NonPowerOfTwoHeadsFollowThePaperRule) {
  // 12 heads: the 8 slopes of 8 heads, then every other slope of 16 heads: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  const auto s = alibi_slopes(12);
  ASSERT_EQ(s.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(s[h], std::pow(0.5, h + 1));
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(s[8 + i], std::pow(2.0, -0.5 - i));
  EXPECT_EQ(alibi_slopes(6).size(), 6u);
  EXPECT_DOUBLE_EQ(alibi_slopes(1)[0], 1.0 / 256);
}

TEST(Alibi, BiasIsMinusSlopeTimesDistance) {
  auto alibi = scheme_with("alibi", {32, 4, 8, 0});
  auto b = alibi->bias(arange_positions(6));  // (1, 4, 6, 6)
  ASSERT_EQ(b.sizes(), (std::vector<int64_t>{1, 4, 6, 6}));
  const auto s = alibi_slopes(4);
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) EXPECT_FLOAT_EQ(b[0][h][i][j].item<float>(), -s[h] * std::abs(i - j));
}

TEST(Alibi, DirectionalOptionSeparatesLeftFromRight) {
  auto alibi = scheme_with("alibi", {32, 4, 8, 0}, {{"directional", true}});
  EXPECT_TRUE(alibi->directional());
  for (auto& p : alibi->named_parameters()) p.value().data().copy_(torch::randn_like(p.value()));
  auto b = alibi->bias(arange_positions(5))[0];  // (H, 5, 5)
  EXPECT_FALSE(torch::allclose(b, b.transpose(-1, -2)));
  // Still a function of j - i only.
  EXPECT_TRUE(torch::allclose(b.narrow(1, 0, 4).narrow(2, 0, 4), b.narrow(1, 1, 4).narrow(2, 1, 4)));
}

TEST(Ape, ReproducesThePublishedFiveByFiveExample) {
  auto ape = scheme_with("ape", {32, 4, 8, 0});
  auto b = ape->bias(arange_positions(5))[0][0];  // (5, 5)
  const double expected[5][5] = {{0.10, 0.08, 0.06, 0.04, 0.02},
                                 {0.08, 0.10, 0.08, 0.06, 0.04},
                                 {0.06, 0.08, 0.10, 0.08, 0.06},
                                 {0.04, 0.06, 0.08, 0.10, 0.08},
                                 {0.02, 0.04, 0.06, 0.08, 0.10}};
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j)
      EXPECT_NEAR(b[i][j].item<double>(), expected[i][j], tolerance::kFloat32Value) << i << "," << j;
}

TEST(Decay, BiasIsExpOfMinusDistanceOverTau) {
  auto decay = scheme_with("decay", {32, 4, 8, 0}, {{"tau", 5.0}});
  auto b = decay->bias(arange_positions(20))[0][0];
  for (int d : {0, 1, 7, 19}) EXPECT_NEAR(b[0][d].item<double>(), std::exp(-d / 5.0), tolerance::kFloat32Value);
  auto learnable = scheme_with("decay", {32, 4, 8, 0}, {{"learnable", true}});
  EXPECT_EQ(learnable->parameters().size(), 1u);
}

TEST(T5, BucketsMatchHandWorkedValuesAtTheEdges) {
  // 32 buckets, bidirectional: 16 per sign, exact below 8, log-spaced from 8 to max_distance 128:
  // bucket(d) = 8 + floor(log(d/8) / log(16) * 8) for 8 <= d < 128, capped at 15; keys to the right add 16.
  auto rel = torch::tensor(
      {0, -1, -7, -8, -11, -12, -15, -16, -31, -32, -64, -127, -128, -1000, 1, 7, 8, 16, 128, 1000}, torch::kLong);
  auto b = t5_buckets(rel, 32, 128, true);
  const std::vector<int64_t> expected = {0, 1, 7, 8, 8, 9, 9, 10, 11, 12, 14, 15, 15, 15, 17, 23, 24, 26, 31, 31};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(b[i].item<int64_t>(), expected[i]) << "offset " << rel[i].item<int64_t>();
  // Causal: only keys to the left get distinct buckets, exact below 16.
  auto c = t5_buckets(torch::tensor({3, 0, -1, -15, -16, -200}, torch::kLong), 32, 128, false);
  const std::vector<int64_t> causal = {0, 0, 1, 15, 16, 31};
  for (size_t i = 0; i < causal.size(); ++i) EXPECT_EQ(c[i].item<int64_t>(), causal[i]) << i;
}

TEST(T5, BothBucketModesTellLeftFromRight) {
  for (bool bidirectional : {true, false}) {
    auto t5 = scheme_with("t5", {32, 4, 8, 0}, {{"bidirectional", bidirectional}});
    EXPECT_TRUE(t5->directional());
    auto b = t5->bias(arange_positions(10))[0];  // (H, 10, 10)
    EXPECT_FALSE(torch::allclose(b, b.transpose(-1, -2))) << "bidirectional " << bidirectional;
  }
}

TEST(T5, BiasLooksUpTheTablePerHead) {
  auto t5 = scheme_with("t5", {32, 4, 8, 0});
  auto table = t5->named_parameters()["table"];  // (32, 4)
  auto b = t5->bias(arange_positions(40))[0];    // (4, 40, 40)
  auto buckets = t5_buckets(relative_positions(torch::arange(40), torch::arange(40)), 32, 128, true);
  for (int h = 0; h < 4; ++h)
    for (int i : {0, 13, 39})
      for (int j : {0, 5, 39})
        EXPECT_FLOAT_EQ(b[h][i][j].item<float>(), table[buckets[i][j].item<int64_t>()][h].item<float>());
}

TEST(Shaw, ClipsOffsetsBeyondK) {
  auto shaw = scheme_with("shaw", {16, 2, 8, 0}, {{"max_distance", 2}});
  auto q = torch::randn({1, 2, 8, 8}), k = torch::randn({1, 2, 8, 8});
  auto s = shaw->score_terms(q, k, torch::matmul(q, k.transpose(-2, -1)), arange_positions(8));  // (1, 2, 8, 8)
  auto keys = shaw->named_parameters()["keys"];                                                  // (5, 8)
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      const int64_t r = std::clamp(j - i, -2, 2) + 2;
      EXPECT_NEAR(s[0][1][i][j].item<double>(), q[0][1][i].dot(keys[r]).item<double>(), tolerance::kFloat32Sum);
    }
  // Offsets 3 and 6 to the right share the clipped embedding.
  EXPECT_FLOAT_EQ(s[0][0][0][3].item<float>() - s[0][0][0][6].item<float>(), 0.0f);
}

TEST(Shaw, ValueTermsEqualTheNaiveSum) {
  auto shaw = scheme_with("shaw", {16, 2, 8, 0}, {{"max_distance", 3}});
  auto probs = torch::softmax(torch::randn({2, 2, 7, 7}), -1);
  auto out = shaw->value_terms(probs, arange_positions(7));  // (2, 2, 7, 8)
  auto values = shaw->named_parameters()["values"];          // (7, 8)
  auto naive = torch::zeros_like(out);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j)
      naive.select(2, i) += probs.select(2, i).select(2, j).unsqueeze(-1) * values[std::clamp(j - i, -3, 3) + 3];
  EXPECT_TRUE(torch::allclose(out, naive, tolerance::kFloat32Sum, tolerance::kFloat32Value));
}

TEST(Shaw, HeadScalesWeighContentAndPosition) {
  auto shaw = scheme_with("shaw", {16, 2, 8, 0}, {{"head_scales", true}});
  auto params = shaw->named_parameters();
  params["content_scale"].data().copy_(torch::tensor({2.0f, 0.5f}));
  params["position_scale"].data().copy_(torch::tensor({3.0f, 0.0f}));
  auto q = torch::randn({1, 2, 5, 8}), k = torch::randn({1, 2, 5, 8});
  auto plain = scheme_with("shaw", {16, 2, 8, 0});
  plain->named_parameters()["keys"].data().copy_(params["keys"]);
  auto qk = torch::matmul(q, k.transpose(-2, -1));
  auto rel = plain->score_terms(q, k, qk, arange_positions(5));
  auto total = qk + shaw->score_terms(q, k, qk, arange_positions(5));
  auto c = torch::tensor({2.0f, 0.5f}).view({1, 2, 1, 1}), p = torch::tensor({3.0f, 0.0f}).view({1, 2, 1, 1});
  EXPECT_TRUE(torch::allclose(total, c * qk + p * rel, tolerance::kFloat32Model, tolerance::kFloat32Sum));
}

TEST(Xl, EqualsTheNaiveFourTermFormula) {
  torch::manual_seed(5);
  const int64_t D = 16, H = 2, Dh = 8, L = 6;
  auto xl = scheme_with("xl", {D, H, Dh, 0});
  auto params = xl->named_parameters();
  params["u"].data().normal_();
  params["v"].data().normal_();
  auto W = params["w_r.weight"];  // (H*Dh, D)
  auto q = torch::randn({2, H, L, Dh}, torch::kFloat64), k = torch::randn({2, H, L, Dh}, torch::kFloat64);
  xl->to(torch::kFloat64);
  auto qk = torch::matmul(q, k.transpose(-2, -1));
  auto fast = xl->score_terms(q, k, qk, arange_positions(L)) + qk;
  auto u = params["u"].to(torch::kFloat64), v = params["v"].to(torch::kFloat64);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          auto R = sinusoidal_table(torch::tensor({i - j}, torch::kLong), D)[0];  // (D)
          auto WR = W.to(torch::kFloat64).matmul(R).view({H, Dh})[h];             // (Dh)
          const double a = q[b][h][i].dot(k[b][h][j]).item<double>();             // content
          const double bb = q[b][h][i].dot(WR).item<double>();                    // content-dependent position
          const double c = u[h].dot(k[b][h][j]).item<double>();                   // global content
          const double d = v[h].dot(WR).item<double>();                           // global position
          EXPECT_NEAR(fast[b][h][i][j].item<double>(), a + bb + c + d, tolerance::kFloat64) << b << h << i << j;
        }
}

TEST(Da, ZeroDistanceIsUnchangedAndFarDistancesRescaled) {
  auto da = scheme_with("da", {16, 4, 4, 0});
  auto scores = torch::randn({1, 4, 6, 6}).abs();  // positive: ReLU is the identity
  auto out = da->reweight(scores, arange_positions(6));
  EXPECT_TRUE(torch::allclose(out.diagonal(0, -2, -1), scores.diagonal(0, -2, -1)));
  // Head 0 has w < 0 (prefers local): far scores shrink; the last head w > 0: they grow (bounded).
  EXPECT_LT(out[0][0][0][5].item<float>(), scores[0][0][0][5].item<float>());
  EXPECT_GT(out[0][3][0][5].item<float>(), scores[0][3][0][5].item<float>());
  // Negative scores are cut by the ReLU.
  EXPECT_TRUE(torch::equal(da->reweight(-scores, arange_positions(6)), torch::zeros_like(scores)));
}

TEST(Sinusoidal, ConcatAndScaledTokensOptions) {
  auto cat = scheme_with("sinusoidal", {8, 2, 4, 0}, {{"combine", "concat"}});
  auto x = torch::randn({2, 5, 8});
  auto out = cat->embed(x, arange_positions(5));
  EXPECT_TRUE(torch::equal(out.narrow(-1, 0, 4), x.narrow(-1, 0, 4)));
  EXPECT_TRUE(torch::allclose(out[1].narrow(-1, 4, 4), sinusoidal_table(torch::arange(5), 4).to(torch::kFloat32)));
  auto scaled = scheme_with("sinusoidal", {16, 2, 8, 0}, {{"scale_tokens", true}});
  auto y = torch::randn({1, 3, 16});
  EXPECT_TRUE(torch::allclose(scaled->embed(y, arange_positions(3)) - 4.0 * y,
                              sinusoidal_table(torch::arange(3), 16).to(torch::kFloat32).unsqueeze(0),
                              tolerance::kFloat32Sum, tolerance::kFloat32Sum));
  EXPECT_THROW(scheme_with("sinusoidal", {8, 2, 4, 0}, {{"combine", "concat"}, {"concat_dim", 3}}), ConfigError);
  // A width for a concatenation that does not happen is refused, not ignored.
  EXPECT_NE(posenc::testing::error_of([] {
              scheme_with("sinusoidal", {8, 2, 4, 0}, {{"concat_dim", 4}});
            }).find("concat_dim has no effect with model.positional.combine=add"),
            std::string::npos);
}

TEST(Learned, ScaledVariantNormalises) {
  auto learned = scheme_with("learned", {8, 2, 4, 0}, {{"scaled", true}, {"max_positions", 16}});
  auto out = learned->embed(torch::randn({2, 5, 8}) * 10, arange_positions(5));
  EXPECT_TRUE(torch::allclose(out.mean(-1), torch::zeros({2, 5}), tolerance::kFloat32Sum,
                              tolerance::kFloat32Sum));  // LayerNorm at init
}

}  // namespace POSENC_TEST_UNIT
