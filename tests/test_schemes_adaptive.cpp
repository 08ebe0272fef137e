// Properties of DAPE (adaptive.cpp): without its MLP it is the scores plus
// KERPLE's bias; each pair is refined from its own scores alone.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

namespace {

constexpr int64_t kHeads = 4, kHeadDim = 8;

PositionalScheme build(const std::string& type, const json& options = json::object()) {
  return scheme_with(type, {kHeads * kHeadDim, kHeads, kHeadDim, 0}, options);
}

/// (H, L, L) bias at positions 0..L-1.
torch::Tensor bias_of(const PositionalScheme& s, int64_t L) { return s->bias(arange_positions(L))[0].detach(); }

}  // namespace

// DAPE with its MLP's output at zero is scores + KERPLE's log bias at the same r1, r2.
TEST(Dape, WithoutItsMlpIsTheScoresPlusKerplesLogBias) {
  auto dape = build("dape");
  auto kerple = build("kerple", {{"variant", "log"}});
  torch::NoGradGuard no_grad;
  auto dp = dape->named_parameters(), kp = kerple->named_parameters();
  kp["r1"].copy_(dp["r1"]);
  kp["r2"].copy_(dp["r2"]);
  dp["out.weight"].zero_();
  const int64_t L = 9;
  torch::manual_seed(3);
  auto scores = torch::randn({2, kHeads, L, L});
  auto out = dape->reweight(scores, arange_positions(L));
  EXPECT_TRUE(torch::allclose(out, scores + bias_of(kerple, L).unsqueeze(0), tolerance::kFloat32Value,
                              tolerance::kFloat32Value));
}

// f reads one query-key pair at a time: a score changed at (i, j) in one head
// changes the output at (i, j) (in every head) and nowhere else.
TEST(Dape, EachPairIsRefinedFromItsOwnScoresAlone) {
  auto dape = build("dape");
  torch::NoGradGuard no_grad;
  const int64_t L = 7;
  torch::manual_seed(4);
  auto scores = torch::randn({1, kHeads, L, L});
  auto changed = scores.clone();
  changed[0][1][4][2] += 3.0;
  auto moved = (dape->reweight(changed, arange_positions(L)) - dape->reweight(scores, arange_positions(L))).abs();
  auto elsewhere = moved.clone();
  elsewhere.select(2, 4).select(2, 2).zero_();  // (1, H): the changed pair in every head
  EXPECT_EQ(elsewhere.max().item<float>(), 0.0f);
  EXPECT_GT(moved[0][1][4][2].item<float>(), 0.0f) << "the changed score itself moves its output";
  EXPECT_GT(moved.select(2, 4).select(2, 2).sum().item<float>() - moved[0][1][4][2].item<float>(), 0.0f)
      << "the MLP mixes the heads of one pair";
}

}  // namespace POSENC_TEST_UNIT
