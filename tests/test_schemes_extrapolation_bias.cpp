// Properties of the biases for length extrapolation (extrapolation_bias.cpp):
// ALiBi's slopes and bias, KERPLE, Sandwich, FIRE.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "posenc/positional/relative_offsets.h"

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

namespace {

constexpr int64_t kHeads = 4, kHeadDim = 8;

PositionalScheme build(const std::string& type, const json& options = json::object()) {
  return scheme_with(type, {kHeads * kHeadDim, kHeads, kHeadDim, 0}, options);
}

/// (H, L, L) bias at positions 0..L-1.
torch::Tensor bias_of(const PositionalScheme& s, int64_t L) { return s->bias(arange_positions(L))[0].detach(); }

/// b[h, i, j] depends only on j - i (compared along every diagonal).
void expect_toeplitz(const torch::Tensor& b, const std::string& what) {
  const int64_t L = b.size(-1);
  for (int64_t i = 1; i < L; ++i)
    for (int64_t j = 1; j < L; ++j)
      ASSERT_TRUE(torch::allclose(b.select(-2, i).select(-1, j), b.select(-2, i - 1).select(-1, j - 1),
                                  tolerance::kFloat32Sum, tolerance::kFloat32Value))
          << what << " at (" << i << ", " << j << ")";
}

}  // namespace

TEST(Kerple, NegativeMonotoneToeplitzAndSymmetricAtInitialization) {
  for (const char* variant : {"log", "power"}) {
    torch::manual_seed(3);
    auto s = build("kerple", {{"variant", variant}});
    EXPECT_FALSE(s->directional());
    const auto b = bias_of(s, 24);  // (H, L, L)
    expect_toeplitz(b, variant);
    EXPECT_TRUE(torch::allclose(b, b.transpose(-1, -2))) << variant;
    EXPECT_TRUE(torch::all(b.diagonal(0, -2, -1) == 0).item<bool>()) << variant;
    // Row 0 is the bias against distance 0, 1, 2, ...: strictly decreasing for r1, r2 > 0.
    const auto row = b.select(-2, 0);  // (H, L)
    EXPECT_TRUE(torch::all(row.narrow(-1, 1, 23) < row.narrow(-1, 0, 23)).item<bool>()) << variant;
  }
}

TEST(Kerple, ParametersStayPositiveAndThePowerAtMostTwo) {
  for (const char* variant : {"log", "power"}) {
    auto s = build("kerple", {{"variant", variant}});
    {
      torch::NoGradGuard no_grad;
      for (auto& p : s->named_parameters()) p.value().fill_(p.key() == "r2" ? 9.0 : -3.0);  // r1 < 0, r2 large
    }
    const auto b = bias_of(s, 10);
    const double d = 9;  // distance of (0, 9)
    const double r1 = 1e-2 /* the default floor, min_r1 */, r2 = std::string(variant) == "power" ? 2.0 : 9.0;
    const double want = std::string(variant) == "power" ? -r1 * std::pow(d, r2) : -r1 * std::log1p(r2 * d);
    EXPECT_NEAR(b[0][0][9].item<double>(), want, tolerance::kFloat32Value) << variant;
    EXPECT_LE(b.max().item<double>(), 0.0);
  }
}

TEST(Kerple, FloorsKeepEveryHeadFallingOffWithDistance) {
  // min_r1 = 0.5, min_r2 = 1 (power): no head can flatten into a global one,
  // whatever its parameters; each starts at or above the floors with a gradient.
  auto s = build("kerple", {{"variant", "power"}, {"min_r1", 0.5}, {"min_r2", 1.0}});
  const auto params = s->named_parameters();
  EXPECT_GE(params["r1"].min().item<double>(), 0.5);
  EXPECT_GE(params["r2"].min().item<double>(), 1.0);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : s->named_parameters()) p.value().fill_(-1.0);
  }
  const auto row = bias_of(s, 40).select(-2, 0);  // (H, 40): bias against distance 0..39
  EXPECT_TRUE(torch::allclose(row, -0.5 * torch::arange(40, torch::kFloat32).expand_as(row)));
  EXPECT_THROW(build("kerple", {{"variant", "power"}, {"min_r2", 2.5}}), ConfigError);
}

TEST(Kerple, FreeHeadsKeepThePapersFloorsBesideHeldOnes) {
  // free_heads = 1 of 4: the first three heads are held at r1, r2 >= 1 (a bias
  // at least the distance below the nearest key's), the last keeps the paper's
  // floor 0.01, so with r1 = r2 = 0.01 it stays within 0.02 of zero out to 39.
  auto s = build("kerple", {{"variant", "power"}, {"min_r1", 1.0}, {"min_r2", 1.0}, {"free_heads", 1}});
  {
    torch::NoGradGuard no_grad;
    for (auto& p : s->named_parameters()) p.value().fill_(-1.0);
  }
  const auto row = bias_of(s, 40).select(-2, 0);  // (H, 40): bias against distance 0..39
  const auto d = torch::arange(40, torch::kFloat32);
  EXPECT_TRUE(torch::allclose(row.slice(0, 0, kHeads - 1), -d.expand({kHeads - 1, 40})));
  EXPECT_TRUE(torch::allclose(row[kHeads - 1], -0.01 * d.pow(0.01)));
  EXPECT_GT(row[kHeads - 1][39].item<double>(), -0.02);
  // Every head held, or none: free_heads = 0 is the floors of every head, = H the paper's everywhere.
  auto none_free = build("kerple", {{"variant", "power"}, {"min_r1", 1.0}, {"min_r2", 1.0}, {"free_heads", kHeads}});
  {
    torch::NoGradGuard no_grad;
    for (auto& p : none_free->named_parameters()) p.value().fill_(-1.0);
  }
  EXPECT_TRUE(torch::allclose(bias_of(none_free, 40).select(-2, 0), -0.01 * d.pow(0.01).expand({kHeads, 40})));
  const std::string error = posenc::testing::error_of([] { build("kerple", {{"free_heads", kHeads + 1}}); });
  EXPECT_NE(error.find("model.positional.free_heads=5"), std::string::npos) << error;
}

TEST(Sandwich, ZeroOnTheDiagonalNegativeToeplitzAndWiderInLaterHeads) {
  auto s = build("sandwich");
  EXPECT_EQ(s->parameters().size(), 0u);  // parameter-free
  const auto b = bias_of(s, 40);
  expect_toeplitz(b, "sandwich");
  EXPECT_TRUE(torch::allclose(b, b.transpose(-1, -2)));
  EXPECT_TRUE(torch::all(b.diagonal(0, -2, -1).abs() < tolerance::kFloat32Value).item<bool>());
  EXPECT_LE(b.max().item<double>(), tolerance::kFloat32Value);
  // Head h divides by 8h/H: head 1's bias is H times head H's.
  EXPECT_TRUE(torch::allclose(b[0], b[kHeads - 1] * kHeads, tolerance::kFloat32Sum, tolerance::kFloat32Sum));
  // The same offsets give the same bias wherever they sit (no absolute position).
  auto shifted = s->bias({torch::arange(100, 140, torch::kLong), torch::arange(100, 140, torch::kLong), 140, nullptr});
  EXPECT_TRUE(torch::allclose(shifted[0], b, tolerance::kFloat32Sum, tolerance::kFloat32Sum));
}

TEST(Fire, RelativeUpToTheThresholdAndProgressivelyInterpolatedPastIt) {
  torch::manual_seed(4);
  auto s = build("fire", {{"init_threshold", 8.0}});
  EXPECT_FALSE(s->directional());
  // Queries below T share one normalizer psi(T): a function of |i - j| only.
  const auto near = bias_of(s, 8);
  expect_toeplitz(near, "fire below T");
  EXPECT_TRUE(torch::allclose(near, near.transpose(-1, -2), tolerance::kFloat32Value, tolerance::kFloat32Value));
  // Past T, a query's farthest key on the left (j = 0) always maps to psi(i)/psi(i) = 1,
  // the input the query at T gives its key at distance T: distances are squeezed into the trained range.
  const auto far = bias_of(s, 64);
  for (int64_t i : {8, 20, 63})
    EXPECT_TRUE(torch::allclose(far.select(-2, i).select(-1, 0), far.select(-2, 8).select(-1, 0),
                                tolerance::kFloat32Sum, tolerance::kFloat32Value))
        << i;
  // Gradients reach the MLP, c and the threshold. The output layer's bias, one
  // constant per head that the softmax cancels, is frozen.
  auto loss = s->bias(arange_positions(40)).sum();
  loss.backward();
  for (const auto& p : s->named_parameters()) {
    if (p.key() == "out.bias") {
      EXPECT_FALSE(p.value().requires_grad());
      continue;
    }
    EXPECT_TRUE(p.value().grad().defined() && p.value().grad().abs().sum().item<double>() > 0) << p.key();
  }
}

}  // namespace POSENC_TEST_UNIT
