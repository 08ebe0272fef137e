// Properties of the additive biases of bias.cpp (T5 buckets, the APE reference's
// 5x5 example, decay values) and of the `directional` option every symmetric
// bias shares (relative_offsets.h).
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

namespace {

constexpr int64_t kHeads = 4, kHeadDim = 8;

PositionalScheme build(const std::string& type, const json& options = json::object()) {
  return scheme_with(type, {kHeads * kHeadDim, kHeads, kHeadDim, 0}, options);
}

/// (H, L, L) bias at positions 0..L-1.
torch::Tensor bias_of(const PositionalScheme& s, int64_t L) { return s->bias(arange_positions(L))[0].detach(); }

/// Registry schemes that declare the shared `directional` option.
std::vector<std::string> schemes_with_direction_option() {
  std::vector<std::string> out;
  for (const auto& info : scheme_registry())
    for (const auto& o : info.options)
      if (o.name == "directional") out.push_back(info.name);
  return out;
}

}  // namespace

TEST(Directional, EverySymmetricBiasSharesTheOption) {
  const auto names = schemes_with_direction_option();
  // Every bias scheme that cannot tell left from right at its defaults offers
  // the option (the registry and the schemes' own claims say which those are).
  for (const auto& info : scheme_registry()) {
    const auto s = build(info.name);
    if (!s->capabilities().bias || s->directional()) continue;
    EXPECT_NE(std::find(names.begin(), names.end(), info.name), names.end()) << info.name << " lacks `directional`";
  }
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    torch::manual_seed(5);  // the same initial weights (kerple's r1, r2) for both instances
    const auto symmetric = build(name);
    EXPECT_FALSE(symmetric->directional());
    const auto b0 = bias_of(symmetric, 9);
    EXPECT_TRUE(torch::allclose(b0.expand({kHeads, 9, 9}), b0.expand({kHeads, 9, 9}).transpose(-1, -2),
                                tolerance::kFloat32Value, tolerance::kFloat32Value));

    torch::manual_seed(5);
    auto s = build(name, {{"directional", true}});
    EXPECT_TRUE(s->directional());
    {
      torch::NoGradGuard no_grad;
      for (auto& p : s->named_parameters()) {
        if (p.key() == "left_offset") p.value().copy_(torch::arange(kHeads, torch::kFloat32) + 1);
        if (p.key() == "right_offset") p.value().copy_(-torch::arange(kHeads, torch::kFloat32));
      }
    }
    const auto b = bias_of(s, 9);  // (H, 9, 9)
    // The offsets land by side: keys left of the query get left_offset, right ones right_offset.
    const auto base = b0.expand({kHeads, 9, 9});
    for (int64_t h = 0; h < kHeads; ++h) {
      EXPECT_NEAR((b[h][5][2] - base[h][5][2]).item<double>(), h + 1.0, tolerance::kFloat32Sum);
      EXPECT_NEAR((b[h][2][5] - base[h][2][5]).item<double>(), -static_cast<double>(h), tolerance::kFloat32Sum);
      EXPECT_NEAR((b[h][4][4] - base[h][4][4]).item<double>(), 0.0, tolerance::kFloat32Value);
    }
    EXPECT_FALSE(torch::allclose(b, b.transpose(-1, -2)));
  }
}

}  // namespace POSENC_TEST_UNIT
