// CoPE (contextual positions): what its positions count, in both directions.
#include <gtest/gtest.h>

#include "helpers.h"
#include "posenc/model/transformer.h"
#include "posenc/model/encoder.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

namespace {

constexpr int64_t kDh = 4;

/// A one-head CoPE whose score term reads back the position itself: q = e_0 and
/// table row r holds (r - (N-1), 0, ...), so q·e[p] = p, interpolation included.
struct PositionProbe {
  int64_t N;
  PositionalScheme cope;
  explicit PositionProbe(int64_t max_count) : N(max_count) {
    cope = scheme_with("cope", {kDh, 1, kDh, 0}, {{"max_count", max_count}});
    auto table = torch::zeros({2 * N - 1, kDh});
    table.select(1, 0).copy_(torch::arange(2 * N - 1, torch::kFloat32) - (N - 1));
    cope->named_parameters()["table"].data().copy_(table);
  }
  /// Positions (L, L) for pre-softmax scores qk (L, L) (their gates are sigmoid(qk / sqrt(Dh))).
  torch::Tensor positions(const torch::Tensor& qk, const Positions& pos) {
    const int64_t L = qk.size(0);
    auto q = torch::zeros({1, 1, L, kDh});
    q.select(-1, 0).fill_(1.0);
    return cope->score_terms(q, q, qk.view({1, 1, L, L}), pos)[0][0].detach();
  }
  torch::Tensor positions(const torch::Tensor& qk) { return positions(qk, arange_positions(qk.size(0))); }
};

}  // namespace

TEST(Cope, WithEveryGateOpenItCountsTokensBackToTheLeftAndForwardToTheRight) {
  PositionProbe probe(64);
  const int64_t L = 10;
  auto p = probe.positions(torch::full({L, L}, 1e4));  // sigmoid = 1 everywhere
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) {
      const double expected = j <= i ? double(i - j + 1) : -double(j - i);
      EXPECT_NEAR(p[i][j].item<double>(), expected, tolerance::kFloat32Model) << i << "," << j;
    }
}

TEST(Cope, CountsOnlyTheKeysWhoseGatesOpen) {
  // Gates open on keys 1, 4, 5 and 8 alone: a key's position is how many of those
  // lie between it and the query, not its distance in tokens.
  PositionProbe probe(64);
  const int64_t L = 10;
  const std::vector<bool> marked = {false, true, false, false, true, true, false, false, true, false};
  auto qk = torch::full({L, L}, -1e4);
  for (int64_t j = 0; j < L; ++j)
    if (marked[j]) qk.select(1, j).fill_(1e4);
  auto p = probe.positions(qk);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) {
      int count = 0;
      if (j <= i) {
        for (int64_t t = j; t <= i; ++t) count += marked[t];
      } else {
        for (int64_t t = i + 1; t <= j; ++t) count -= marked[t];
      }
      EXPECT_NEAR(p[i][j].item<double>(), count, tolerance::kFloat32Model) << i << "," << j;
    }
  // Keys 6 and 7 sit at different distances from query 9 but at the same contextual position.
  EXPECT_NEAR(p[9][6].item<double>(), p[9][7].item<double>(), tolerance::kFloat32Value);
}

TEST(Cope, FractionalPositionsInterpolateAndLargeOnesClamp) {
  PositionProbe probe(3);
  const int64_t L = 8;
  auto open = probe.positions(torch::full({L, L}, 1e4));
  EXPECT_NEAR(open.max().item<double>(), 2.0, tolerance::kFloat32Sum);   // clamped at N - 1
  EXPECT_NEAR(open.min().item<double>(), -2.0, tolerance::kFloat32Sum);  // and at -(N - 1)
  // Every gate at one half: p = (i - j + 1) / 2 to the left, -(j - i) / 2 to the right, read back exactly.
  auto half = probe.positions(torch::zeros({L, L}));
  EXPECT_NEAR(half[3][3].item<double>(), 0.5, tolerance::kFloat32Sum);
  EXPECT_NEAR(half[3][1].item<double>(), 1.5, tolerance::kFloat32Sum);
  EXPECT_NEAR(half[3][4].item<double>(), -0.5, tolerance::kFloat32Sum);
  EXPECT_NEAR(half[3][6].item<double>(), -1.5, tolerance::kFloat32Sum);
}

TEST(Cope, KeysLeftOfTheQueryNeverReadGatesRightOfIt) {
  // The left-hand count of query i uses gates t <= i only, so under a causal mask the
  // scheme is the paper's causal CoPE; the position ids do not matter at all.
  torch::manual_seed(3);
  PositionProbe probe(64);
  const int64_t L = 9;
  auto qk = torch::randn({L, L}) * 3;
  auto changed = qk.tril() + torch::randn({L, L}).triu(1) * 3;  // new scores right of the diagonal
  auto a = probe.positions(qk), b = probe.positions(changed);
  EXPECT_TRUE(torch::allclose(a.tril(), b.tril(), tolerance::kFloat32Value, tolerance::kFloat32Value));
  EXPECT_FALSE(
      torch::allclose(a.triu(1), b.triu(1), tolerance::kFloat32Gradient, tolerance::kFloat32Gradient));  // O(1) apart
  auto ids = torch::arange(100, 100 + L, torch::kLong);
  EXPECT_TRUE(torch::allclose(probe.positions(qk, Positions{ids, ids, 100 + L, nullptr}), a));
}

TEST(Cope, GradientsReachTheGatesThroughTheFractionalPart) {
  PositionProbe probe(64);
  auto qk = torch::randn({6, 6}).requires_grad_(true);
  const int64_t L = 6;
  auto q = torch::zeros({1, 1, L, kDh});
  q.select(-1, 0).fill_(1.0);
  probe.cope->score_terms(q, q, qk.view({1, 1, L, L}), arange_positions(L)).sum().backward();
  ASSERT_TRUE(qk.grad().defined());
  EXPECT_GT(qk.grad().abs().min().item<double>(), 0.0);  // every gate moves some position
}

TEST(Cope, ATrainedModelStillRunsFarPastItsTrainingLength) {
  // Positions are clamped, so a 512-token input reads only table rows that exist.
  auto config = posenc::testing::config_with({"model.positional.type=cope", "model.positional.max_count=8",
                                              "model.d_model=16", "model.heads=2", "model.layers=1", "model.d_ff=32"});
  Encoder model(config.model, 16);
  model->eval();
  auto logits = model->forward(torch::randint(1, 17, {2, 512}, torch::kLong));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
}

}  // namespace POSENC_TEST_UNIT
