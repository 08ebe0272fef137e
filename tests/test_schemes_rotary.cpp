// Properties of the rotary schemes (rotary.cpp): RoPE in both layouts, partial
// rotation, its scaling modes, and xPos.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "posenc/positional/tables.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

namespace {
constexpr int64_t kHeadDim = 8;
}  // namespace

class RopeLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(RopeLayouts, ScoreDependsOnlyOnOffset) {
  torch::manual_seed(0);
  auto rope = scheme_with("rope", {32, 2, 16, 0}, {{"layout", GetParam()}});
  auto q = torch::randn({1, 2, 1, 16}, torch::kFloat64), k = torch::randn({1, 2, 1, 16}, torch::kFloat64);
  auto score = [&](int64_t m, int64_t n) {
    auto qq = q.clone(), kk = k.clone();
    Positions pos{torch::tensor({m}, torch::kLong), torch::tensor({n}, torch::kLong), std::max(m, n) + 1, nullptr};
    rope->rotate(qq, kk, pos);
    return (qq * kk).sum(-1);  // (1, 2, 1)
  };
  for (int64_t offset : {-9, -1, 0, 3, 40}) {
    auto ref = score(100 + offset, 100);
    for (int64_t n : {0, 5, 17, 250})
      if (n + offset >= 0) {
        EXPECT_TRUE(torch::allclose(score(n + offset, n), ref, tolerance::kFloat64, tolerance::kFloat64))
            << "offset " << offset;
      }
  }
  // And it does depend on the offset.
  EXPECT_FALSE(torch::allclose(score(3, 0), score(0, 3), tolerance::kFloat32Value, tolerance::kFloat32Value));
}

TEST_P(RopeLayouts, RotationPreservesNormsAndFixesPositionZero) {
  auto rope = scheme_with("rope", {32, 2, 16, 0}, {{"layout", GetParam()}});
  auto q = torch::randn({2, 2, 6, 16}), k = torch::randn({2, 2, 6, 16});
  auto qq = q.clone(), kk = k.clone();
  rope->rotate(qq, kk, arange_positions(6));
  EXPECT_TRUE(torch::allclose(qq.norm(2, -1), q.norm(2, -1), tolerance::kFloat32Sum, tolerance::kFloat32Sum));
  EXPECT_TRUE(torch::allclose(qq.select(2, 0), q.select(2, 0)));
}

INSTANTIATE_TEST_SUITE_P(Layouts, RopeLayouts, ::testing::Values("half", "interleaved"));

TEST(Rope, InterleavedMatchesTheComplexNumberFormula) {
  // The complex-number form: pairs (2i, 2i+1) as complex numbers times exp(i m theta_i), theta_i = 10000^(-2i/d).
  auto rope = scheme_with("rope", {8, 1, 8, 0}, {{"layout", "interleaved"}});
  auto q = torch::randn({1, 1, 4, 8}, torch::kFloat64), k = q.clone();
  auto qq = q.clone();
  rope->rotate(qq, k, arange_positions(4));
  for (int64_t m = 0; m < 4; ++m)
    for (int64_t i = 0; i < 4; ++i) {
      const double th = m * std::pow(10000.0, -2.0 * i / 8), a = q[0][0][m][2 * i].item<double>(),
                   b = q[0][0][m][2 * i + 1].item<double>();
      EXPECT_NEAR(qq[0][0][m][2 * i].item<double>(), a * std::cos(th) - b * std::sin(th), tolerance::kFloat32Value);
      EXPECT_NEAR(qq[0][0][m][2 * i + 1].item<double>(), a * std::sin(th) + b * std::cos(th), tolerance::kFloat32Value);
    }
}

TEST(Rope, PartialRotaryLeavesTheRestUntouched) {
  auto rope = scheme_with("rope", {64, 4, 16, 0}, {{"fraction", 0.5}});
  auto q = torch::randn({1, 4, 5, 16}), k = torch::randn({1, 4, 5, 16});
  auto qq = q.clone(), kk = k.clone();
  rope->rotate(qq, kk, arange_positions(5));
  EXPECT_TRUE(torch::equal(qq.narrow(-1, 8, 8), q.narrow(-1, 8, 8)));
  EXPECT_FALSE(torch::allclose(qq.narrow(-1, 0, 8), q.narrow(-1, 0, 8)));
  EXPECT_THROW(scheme_with("rope", {64, 4, 16, 0}, {{"fraction", 0.05}}), ConfigError);
}

namespace {

/// q (1, 1, L, Dh) rotated by a rope built with `options` at `positions`; `end` as a forward would pass it.
torch::Tensor rotated(const json& options, const torch::Tensor& x, const torch::Tensor& positions, int64_t end) {
  auto rope = scheme_with("rope", {kHeadDim, 1, kHeadDim, 0}, options);
  auto q = x.clone(), k = x.clone();
  rope->rotate(q, k, {positions, positions, end, nullptr});
  return q;
}

}  // namespace

TEST(RopeScaling, LinearAtSPEqualsUnscaledAtPAndDynamicIsUnscaledWithinTheOriginalLength) {
  torch::manual_seed(0);
  const auto x = torch::randn({1, 1, 10, kHeadDim}, torch::kFloat64);
  const auto p = torch::arange(10, torch::kLong);
  const auto plain = rotated(json::object(), x, p, 10);
  // linear, factor 3: position 3p rotates as p did.
  EXPECT_TRUE(
      torch::allclose(rotated({{"scaling", "linear"}, {"factor", 3.0}, {"original_max_position", 16}}, x, p * 3, 28),
                      plain, tolerance::kFloat64, tolerance::kFloat64));
  // dynamic_ntk: nothing changes while the sequence fits in original_max_position ...
  const json dynamic = {{"scaling", "dynamic_ntk"}, {"factor", 4.0}, {"original_max_position", 16}};
  EXPECT_TRUE(torch::allclose(rotated(dynamic, x, p, 16), plain, tolerance::kFloat64Closed, tolerance::kFloat64Closed));
  // ... and past it the low frequencies stretch (the first pair, theta_0 = 1, never changes).
  const auto longer = rotated(dynamic, x, p, 64);
  EXPECT_FALSE(torch::allclose(longer, plain, tolerance::kFloat32Value, tolerance::kFloat32Value));
  // Factor 1 is no scaling in the static modes (dynamic NTK, as in HF, still
  // stretches with L/L0 past the original length).
  for (const char* mode : {"linear", "ntk", "yarn"})
    EXPECT_TRUE(torch::allclose(rotated({{"scaling", mode}, {"factor", 1.0}, {"original_max_position", 8}}, x, p, 40),
                                plain, tolerance::kFloat64, tolerance::kFloat64))
        << mode;
  // Scaling without original_max_position is a clear error.
  EXPECT_THROW(scheme_with("rope", {kHeadDim, 1, kHeadDim, 0}, {{"scaling", "yarn"}, {"factor", 2.0}}), ConfigError);
  // So is a factor or an original length without a scaling: they would change nothing.
  EXPECT_THROW(scheme_with("rope", {kHeadDim, 1, kHeadDim, 0}, {{"factor", 2.0}}), ConfigError);
  EXPECT_THROW(scheme_with("rope", {kHeadDim, 1, kHeadDim, 0}, {{"original_max_position", 16}}), ConfigError);
}

TEST(RopeScaling, ScoresStillDependOnlyOnTheOffset) {
  torch::manual_seed(1);
  const auto q = torch::randn({1, 1, 1, kHeadDim}, torch::kFloat64),
             k = torch::randn({1, 1, 1, kHeadDim}, torch::kFloat64);
  for (const json& options :
       {json{{"scaling", "yarn"}, {"factor", 4.0}, {"original_max_position", 8}},
        json{{"scaling", "ntk"}, {"factor", 4.0}, {"original_max_position", 8}}, json{{"drop_low_frequencies", 0.5}}}) {
    const auto score = [&](int64_t m, int64_t n) {
      auto qm = rotated(options, q, torch::full({1}, m, torch::kLong), 64);
      auto kn = rotated(options, k, torch::full({1}, n, torch::kLong), 64);
      return (qm * kn).sum().item<double>();
    };
    EXPECT_NEAR(score(7, 3), score(30, 26), tolerance::kFloat64) << options.dump();
    EXPECT_NEAR(score(2, 9), score(40, 47), tolerance::kFloat64) << options.dump();
  }
  // p-RoPE: the dropped (lowest-frequency) pairs are not rotated at all.
  const auto x = torch::randn({1, 1, 5, kHeadDim}, torch::kFloat64);
  const auto out = rotated({{"drop_low_frequencies", 0.5}}, x, torch::arange(5, torch::kLong), 5);
  // layout half: pairs (i, i + R/2); the last R/4 of each half are the low frequencies.
  for (int64_t d : {2, 3, 6, 7}) EXPECT_TRUE(torch::allclose(out.select(-1, d), x.select(-1, d))) << d;
  EXPECT_FALSE(torch::allclose(out.select(-1, 1), x.select(-1, 1)));
}

TEST(Xpos, ScoresDependOnlyOnTheOffsetAndDecayWithItAsZetaToTheDistance) {
  torch::manual_seed(2);
  auto xpos = scheme_with("xpos", {kHeadDim, 1, kHeadDim, 0}, {{"scale_base", 16.0}});
  auto rope = scheme_with("rope", {kHeadDim, 1, kHeadDim, 0});
  const auto q = torch::randn({1, 1, 1, kHeadDim}, torch::kFloat64),
             k = torch::randn({1, 1, 1, kHeadDim}, torch::kFloat64);
  const auto score = [&](PositionalScheme& s, int64_t m, int64_t n) {
    auto qm = q.clone(), kn = k.clone(), unused_q = q.clone(), unused_k = k.clone();
    s->rotate(qm, unused_k, {torch::full({1}, m, torch::kLong), torch::full({1}, m, torch::kLong), 64, nullptr});
    s->rotate(unused_q, kn, {torch::full({1}, n, torch::kLong), torch::full({1}, n, torch::kLong), 64, nullptr});
    return (qm * kn).sum().item<double>();
  };
  EXPECT_NEAR(score(xpos, 10, 4), score(xpos, 40, 34), tolerance::kFloat64);
  EXPECT_NEAR(score(xpos, 3, 20), score(xpos, 33, 50), tolerance::kFloat64);
  // At offset 0 the scales cancel: the score is RoPE's.
  EXPECT_NEAR(score(xpos, 9, 9), score(rope, 9, 9), tolerance::kFloat64);
  EXPECT_TRUE(xpos->directional());
  EXPECT_TRUE(xpos->capabilities().fits_fused_attention());
}

// Tables cached for one forward are kept apart per dtype: a shared RoPE
// instance that rotates float32 q,k (embedded QKV's first block) and then
// bf16 ones (later blocks under autocast) gives each its own cos/sin.
TEST(ForwardCache, TablesAreKeptApartPerDtype) {
  ForwardCache cache;
  const auto pos = arange_positions(6, &cache);
  auto rope = scheme_with("rope", {16, 1, 16, 0});
  torch::manual_seed(0);
  auto q32 = torch::randn({1, 1, 6, 16}), k32 = q32.clone();
  auto q16 = q32.to(torch::kBFloat16), k16 = q16.clone();
  rope->rotate(q32, k32, pos);
  rope->rotate(q16, k16, pos);
  EXPECT_EQ(q16.scalar_type(), torch::kBFloat16) << "a float32 table was reused for bf16 inputs";
  EXPECT_EQ(cache.size(), 4u);  // cos/sin for q and for k, each in float32 and in bf16
  EXPECT_TRUE(torch::allclose(q16.to(torch::kFloat), q32, tolerance::kBf16, tolerance::kBf16));
}

}  // namespace POSENC_TEST_UNIT
