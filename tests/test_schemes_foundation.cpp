// Properties of the foundation schemes, checked against their definitions
// ("The Position Problem" tutorial and the course lesson of docs/sources.md):
// sinusoidal, RoPE, learned.
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

TEST(Sinusoidal, HandExerciseWithFourDims) {
  // PE(p) = [sin(p), cos(p), sin(p/100), cos(p/100)] for d_model = 4.
  auto pe = sinusoidal_table(torch::tensor({0, 1, 2, 5, 6}, torch::kLong), 4).to(torch::kFloat64);
  auto expect = [&](int row, std::vector<double> v) {
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(pe[row][i].item<double>(), v[i], tolerance::kFloat32Value) << "row " << row << " dim " << i;
  };
  expect(0, {0.0, 1.0, 0.0, 1.0});
  expect(1, {std::sin(1.0), std::cos(1.0), std::sin(0.01), std::cos(0.01)});
  // "The Position Problem" tutorial (docs/sources.md) prints PE[1] = [0.841, 0.540, 0.010, 0.999] and PE[2] = [0.909, -0.416, 0.020, 0.998].
  EXPECT_NEAR(pe[1][0].item<double>(), 0.841, tolerance::kPrinted3);
  EXPECT_NEAR(pe[1][1].item<double>(), 0.540, tolerance::kPrinted3);
  EXPECT_NEAR(pe[2][0].item<double>(), 0.909, tolerance::kPrinted3);
  EXPECT_NEAR(pe[2][1].item<double>(), -0.416, tolerance::kPrinted3);
  EXPECT_NEAR(pe[2][2].item<double>(), 0.020, tolerance::kPrinted3);
  // PE(0)·PE(1) = PE(5)·PE(6) = cos(1) + cos(0.01): only the offset matters.
  const double d01 = pe[0].dot(pe[1]).item<double>(), d56 = pe[3].dot(pe[4]).item<double>();
  EXPECT_NEAR(d01, std::cos(1.0) + std::cos(0.01), tolerance::kFloat32Value);
  EXPECT_NEAR(d56, d01, tolerance::kFloat32Value);
  // PE(0)·PE(5) = cos(5) + cos(0.05): farther apart, smaller.
  const double d05 = pe[0].dot(pe[3]).item<double>();
  EXPECT_NEAR(d05, std::cos(5.0) + std::cos(0.05), tolerance::kFloat32Value);
  EXPECT_LT(d05, d01);
}

TEST(Sinusoidal, ShiftIsAFixedLinearMap) {
  // PE(p + k) = T_k PE(p) with T_k block-diagonal rotations, the same for every p.
  const int64_t D = 16, k = 7;
  auto p = torch::arange(0, 200, torch::kLong);
  auto pe = sinusoidal_table(p, D).to(torch::kFloat64);           // (200, D)
  auto shifted = sinusoidal_table(p + k, D).to(torch::kFloat64);  // (200, D)
  auto T = torch::zeros({D, D}, torch::kFloat64);
  for (int64_t i = 0; i < D / 2; ++i) {
    const double w = std::pow(10000.0, -2.0 * i / D), c = std::cos(w * k), s = std::sin(w * k);
    // [sin(w(p+k)); cos(w(p+k))] = [[c, s], [-s, c]] [sin(wp); cos(wp)]
    T[2 * i][2 * i] = c;
    T[2 * i][2 * i + 1] = s;
    T[2 * i + 1][2 * i] = -s;
    T[2 * i + 1][2 * i + 1] = c;
  }
  EXPECT_TRUE(torch::allclose(pe.matmul(T.t()), shifted, tolerance::kFloat64, tolerance::kFloat64));
}

TEST(Sinusoidal, ConcatLayoutIsAPermutationOfInterleaved) {
  auto p = torch::arange(0, 50, torch::kLong);
  auto inter = sinusoidal_table(p, 8, 10000.0, "interleaved");
  auto concat = sinusoidal_table(p, 8, 10000.0, "concat");
  auto idx = torch::tensor({0, 2, 4, 6, 1, 3, 5, 7}, torch::kLong);
  EXPECT_TRUE(torch::allclose(inter.index_select(1, idx), concat));
}

TEST(Sinusoidal, EmbedAddsTheTableAtTheGivenPositions) {
  auto s = scheme_with("sinusoidal", {8, 2, 4, 0});
  // float64 and a fixed seed: in float32, (x + pe) - x loses up to ~1e-7 |x|, more
  // than allclose's atol where pe is near 0, so the check failed for some draws.
  torch::manual_seed(0);
  auto x = torch::randn({2, 5, 8}, torch::kFloat64);
  auto ids = torch::tensor({3, 4, 5, 6, 7}, torch::kLong);  // an offset: positions are explicit
  Positions pos{ids, ids, 8, nullptr};
  auto out = s->embed(x, pos);
  EXPECT_TRUE(torch::allclose(out - x, sinusoidal_table(ids, 8).unsqueeze(0).expand({2, 5, 8})));
}

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

TEST(Learned, TableShapeAndMaxLengthError) {
  auto learned = scheme_with("learned", {8, 2, 4, 0}, {{"max_positions", 10}});
  auto params = learned->named_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].value().sizes(), (std::vector<int64_t>{10, 8}));
  EXPECT_EQ(learned->max_positions(), 10);
  auto x = torch::zeros({1, 10, 8});
  EXPECT_TRUE(torch::allclose(learned->embed(x, arange_positions(10)), params[0].value().unsqueeze(0)));
  try {
    learned->embed(torch::zeros({1, 11, 8}), arange_positions(11));
    FAIL() << "no error for position 10";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("position 10 has no row"), std::string::npos);
  }
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
