// Properties of the embedding-time schemes (absolute.cpp), each against its
// definition ("The Position Problem" tutorial and the course lesson of
// docs/sources.md): sinusoidal tables and their options, learned tables.
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
