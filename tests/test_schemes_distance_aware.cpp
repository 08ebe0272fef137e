// Properties of DA (distance_aware.cpp): f(0) = 1, far distances rescaled.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

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

}  // namespace POSENC_TEST_UNIT
