// Properties of the relative schemes with score and value terms
// (relative_attention.cpp): Shaw's clipping and value terms, the XL
// decomposition against its naive formula.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "posenc/positional/relative_offsets.h"
#include "posenc/positional/tables.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

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

}  // namespace POSENC_TEST_UNIT
