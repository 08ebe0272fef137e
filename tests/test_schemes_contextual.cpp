// CoPE (contextual positions): what its positions count, in both directions.
// FoX (the Forgetting Transformer's forget gate): what its gates cost between a query and a key.
#include <gtest/gtest.h>

#include <cmath>

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

// ---- FoX ----

namespace {

/// One head's logit change D (H, Lq, Lk), the score term divided back by sqrt(Dh), for keys k (1, H, L, Dh).
torch::Tensor fox_bias(const PositionalScheme& fox, const torch::Tensor& k) {
  const int64_t L = k.size(2), Dh = k.size(3);
  auto q = torch::zeros_like(k);  // the gates never read the queries
  return (fox->score_terms(q, k, torch::Tensor(), arange_positions(L)) / std::sqrt(double(Dh)))[0].detach();
}

/// log sigmoid of every token's gate logit w_h·k_t + b_h: (H, L).
torch::Tensor log_gates(const PositionalScheme& fox, const torch::Tensor& k) {
  auto p = fox->named_parameters();
  auto w = p["gate_weight"].detach(), b = p["gate_bias"].detach();
  return torch::log_sigmoid((k[0] * w.unsqueeze(1)).sum(-1) + b.unsqueeze(1));
}

}  // namespace

TEST(Fox, AConstantGateIsALinearDecayWithTheSlopeOfItsGate) {
  const int64_t H = 3, L = 9;
  auto fox = scheme_with("fox", {H * kDh, H, kDh, 0}, {{"gate", "constant"}});
  fox->to(torch::kFloat64);
  auto b = torch::tensor({-2.0, 0.0, 3.0}, torch::kFloat64);
  fox->named_parameters()["gate_bias"].data().copy_(b);
  EXPECT_EQ(fox->named_parameters().size(), 1u);  // no w_h: the gate reads nothing
  EXPECT_FALSE(fox->directional());               // a function of |i - j|: left and right alike
  auto distance = (torch::arange(L).view({L, 1}) - torch::arange(L).view({1, L})).abs().to(torch::kFloat64);
  auto expected = torch::log_sigmoid(b).view({H, 1, 1}) * distance;  // ALiBi with slope -log sigmoid(b_h)
  EXPECT_TRUE(torch::allclose(fox_bias(fox, torch::randn({2, H, L, kDh}, torch::kFloat64)).select(0, 0), expected[0]));
  EXPECT_TRUE(torch::allclose(fox_bias(fox, torch::randn({1, H, L, kDh}, torch::kFloat64)), expected));
}

TEST(Fox, EachTokenSetsWhatCrossingItCostsAndCostsAdd) {
  const int64_t H = 2, L = 12;
  auto fox = scheme_with("fox", {H * kDh, H, kDh, 0}, {{"init_std", 1.0}});
  fox->to(torch::kFloat64);
  auto k = torch::randn({1, H, L, kDh}, torch::kFloat64);
  auto D = fox_bias(fox, k);   // (H, L, L)
  auto g = log_gates(fox, k);  // (H, L), every entry < 0
  ASSERT_TRUE(g.lt(0).all().item<bool>());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i) {
      EXPECT_EQ(D[h][i][i].item<double>(), 0.0);  // a query forgets nothing of itself
      // The left neighbour is one crossing of the query's own gate, the right one of the neighbour's.
      if (i > 0) {
        EXPECT_NEAR(D[h][i][i - 1].item<double>(), g[h][i].item<double>(), 1e-12);
      }
      if (i + 1 < L) {
        EXPECT_NEAR(D[h][i][i + 1].item<double>(), g[h][i + 1].item<double>(), 1e-12);
      }
      // Costs add along the way: from i to j through any m between them.
      for (int64_t j = 0; j < L; ++j)
        for (int64_t m = std::min(i, j); m <= std::max(i, j); ++m)
          ASSERT_NEAR(D[h][i][j].item<double>(), (D[h][i][m] + D[h][m][j]).item<double>(), 1e-9)
              << "h " << h << " i " << i << " j " << j << " m " << m;
    }
  // Token 5's gate set by hand (b = 0, so the logit is w·k_5): closed at logit -2
  // (log f = -2.13) and open at +40 (log f = -4e-18). An open gate is crossed for
  // free: the tokens on either side of it are then as close as neighbours. Both are
  // set, not drawn, so that the margin holds whatever keys the generator gives.
  auto w = fox->named_parameters()["gate_weight"].detach();
  auto with_gate_logit = [&](double logit) {
    auto keys = k.clone();
    keys[0][0][5] = w[0] * (logit / w[0].pow(2).sum());  // w_0·k_5 = logit
    return keys;
  };
  auto closed = with_gate_logit(-2.0), open = with_gate_logit(40.0);
  auto D_closed = fox_bias(fox, closed), D_open = fox_bias(fox, open);
  const double g6 = log_gates(fox, closed)[0][6].item<double>();
  EXPECT_NEAR(D_closed[0][6][4].item<double>(), g6 + std::log(1.0 / (1.0 + std::exp(2.0))), 1e-12);
  EXPECT_NEAR(D_open[0][6][4].item<double>(), g6, 1e-12);
  // The other head's gate at token 5 reads its own w: closing or opening head 0's changes nothing there.
  EXPECT_TRUE(torch::allclose(D_open[1], D[1]));
  EXPECT_TRUE(torch::allclose(D_closed[1], D[1]));
}

}  // namespace POSENC_TEST_UNIT
