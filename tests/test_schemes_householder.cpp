// PaTH (products of Householder-like matrices between query and key): every
// logit against the product written out, and the closed forms of projections
// and reflections.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "posenc/positional/scheme.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

namespace {

constexpr int64_t kHeads = 2, kDh = 4;

/// A float64 PaTH scheme whose parameters are drawn at random (from the suite's
/// generator: POSENC_TEST_SEED draws others), beta in all of (0, 2) rather than
/// near 1 as at the start of training.
PositionalScheme random_path(bool causal) {
  auto path = scheme_with("path", {kHeads * kDh, kHeads, kDh, 0, causal});
  path->to(torch::kFloat64);
  auto p = path->named_parameters();
  p["transform"].data().copy_(torch::randn({kHeads, kDh, kDh}, torch::kFloat64));
  p["beta_weight"].data().copy_(torch::randn({kHeads, kDh}, torch::kFloat64));
  p["beta_bias"].data().copy_(torch::randn({kHeads}, torch::kFloat64));
  return path;
}

/// The logits written as the definition reads, one D x D product per pair:
/// q_iᵀ H_i ... H_{j+1} k_j left of the query, q_iᵀ H_{i+1} ... H_j k_j right of it.
/// q, k (1, H, L, D); w_t and beta_t from the scheme's parameters. -> (H, L, L)
torch::Tensor logits_by_products(const PositionalScheme& path, const torch::Tensor& q, const torch::Tensor& k) {
  auto p = path->named_parameters();
  const auto M = p["transform"].detach(), u = p["beta_weight"].detach(), b = p["beta_bias"].detach();
  const int64_t H = q.size(1), L = q.size(2), D = q.size(3);
  auto out = torch::zeros({H, L, L}, torch::kFloat64);
  const auto eye = torch::eye(D, torch::kFloat64);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<torch::Tensor> steps;  // H_t
    for (int64_t t = 0; t < L; ++t) {
      auto kt = k[0][h][t];
      auto w = torch::mv(M[h], kt);
      w = w / w.norm();
      const double beta = 2.0 / (1.0 + std::exp(-(torch::dot(u[h], kt).item<double>() + b[h].item<double>())));
      steps.push_back(eye - beta * torch::outer(w, w));
    }
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) {
        auto row = q[0][h][i].unsqueeze(0);  // (1, D), carried from the query toward the key
        if (j < i)
          for (int64_t t = i; t > j; --t) row = torch::matmul(row, steps[t]);
        else
          for (int64_t t = i + 1; t <= j; ++t) row = torch::matmul(row, steps[t]);
        out[h][i][j] = torch::dot(row[0], k[0][h][j]);
      }
  }
  return out;
}

/// Logits as attention adds them up: q·kᵀ plus the scheme's score term. (1, H, Lq, Lk)
torch::Tensor scheme_logits(const PositionalScheme& path, const torch::Tensor& q, const torch::Tensor& k) {
  return torch::matmul(q, k.transpose(-1, -2)) + path->score_terms(q, k, torch::Tensor(), arange_positions(k.size(2)));
}

}  // namespace

TEST(PathScheme, EveryLogitIsTheProductOfTheStepsBetweenQueryAndKey) {
  // Lengths inside one chunk of the computation, at its edge, past it and over several.
  for (const int64_t L : {5, 32, 33, 70}) {
    for (const bool causal : {false, true}) {
      auto path = random_path(causal);
      auto q = torch::randn({1, kHeads, L, kDh}, torch::kFloat64);
      auto k = torch::randn({1, kHeads, L, kDh}, torch::kFloat64);
      auto expected = logits_by_products(path, q, k);
      auto got = scheme_logits(path, q, k)[0];
      // A decoder's keys right of the query are masked: its term there is 0.
      if (causal) expected = expected.tril() + torch::matmul(q, k.transpose(-1, -2))[0].triu(1);
      EXPECT_TRUE(torch::allclose(got, expected, tolerance::kFloat64, tolerance::kFloat64))
          << "L=" << L << " causal=" << causal << " max error " << (got - expected).abs().max().item<double>();
      // The last few queries over every key, as from a KV cache: one (a decoding step), a few
      // inside one chunk, and runs that start inside a chunk and cross into the next ones.
      for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{31}, int64_t{40}}) {
        if (n > L) continue;
        auto last = scheme_logits(path, q.narrow(2, L - n, n), k)[0];
        EXPECT_TRUE(torch::allclose(last, expected.narrow(1, L - n, n), tolerance::kFloat64, tolerance::kFloat64))
            << "L=" << L << " causal=" << causal << " last " << n << " queries";
      }
    }
  }
}

TEST(PathScheme, OneDirectionEverywhereGivesTheClosedFormsOfProjectionsAndReflections) {
  // Every key the same vector c, and u_h = 0: every token has the same w and beta = 2 sigmoid(b),
  // so the logit of i for j is q_iᵀ H^|i-j| c with H = I - beta w wᵀ.
  const int64_t L = 40;
  auto path = random_path(false);
  auto p = path->named_parameters();
  p["beta_weight"].data().zero_();
  auto c = torch::randn({kDh}, torch::kFloat64);
  auto k = c.view({1, 1, 1, kDh}).expand({1, kHeads, L, kDh}).contiguous();
  auto q = torch::randn({1, kHeads, L, kDh}, torch::kFloat64);
  const auto M = p["transform"].detach();
  for (const double bias : {0.0, 40.0, -40.0}) {  // beta = 1, 2 and 0 to float64's precision
    p["beta_bias"].data().fill_(bias);
    const double beta = 2.0 / (1.0 + std::exp(-bias));
    auto logits = scheme_logits(path, q, k)[0];
    for (int64_t h = 0; h < kHeads; ++h) {
      auto w = torch::mv(M[h], c);
      w = w / w.norm();
      auto once = c - beta * torch::dot(w, c) * w;  // H c
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          const int64_t steps = std::abs(i - j);
          // A projection (beta = 1) is idempotent, a reflection (2) its own inverse, and 0 the identity.
          const bool plain = steps == 0 || (bias > 0 && steps % 2 == 0) || bias < 0;
          const double expected = torch::dot(q[0][h][i], plain ? c : once).item<double>();
          EXPECT_NEAR(logits[h][i][j].item<double>(), expected, tolerance::kFloat64)
              << "beta=" << beta << " h=" << h << " i=" << i << " j=" << j;
        }
    }
  }
}

TEST(PathScheme, NoLogitExceedsTheProductOfTheNormsAndDistanceIsNotCounted) {
  // The steps' eigenvalues lie in (-1, 1]: carrying a query never lengthens it.
  const int64_t L = 200;
  auto path = random_path(true);
  auto q = torch::randn({1, kHeads, L, kDh}, torch::kFloat64);
  auto k = torch::randn({1, kHeads, L, kDh}, torch::kFloat64);
  auto logits = scheme_logits(path, q, k)[0].tril();
  auto bound = torch::matmul(q.norm(2, -1, true), k.norm(2, -1, true).transpose(-1, -2))[0];  // (H, L, L)
  EXPECT_LE((logits.abs() - bound).max().item<double>(), tolerance::kFloat64);
  // The same tokens moved further apart by tokens whose steps are the identity (beta -> 0 there):
  // what a logit sees of the distance is what lies between, not how many tokens.
  auto p = path->named_parameters();
  p["beta_weight"].data().zero_();
  p["beta_bias"].data().fill_(0.0);
  auto near = scheme_logits(path, q.narrow(2, 0, 2), k.narrow(2, 0, 2))[0];
  auto gap = torch::zeros({1, kHeads, 5, kDh}, torch::kFloat64);  // w = normalize(0) = 0: H_t = I
  auto far_k = torch::cat({k.narrow(2, 0, 1), gap, k.narrow(2, 1, 1)}, 2);
  auto far_q = torch::cat({q.narrow(2, 0, 1), gap, q.narrow(2, 1, 1)}, 2);
  auto far = scheme_logits(path, far_q, far_k)[0];
  EXPECT_NEAR(far[0][6][0].item<double>(), near[0][1][0].item<double>(), tolerance::kFloat64);
  EXPECT_NEAR(far[1][6][0].item<double>(), near[1][1][0].item<double>(), tolerance::kFloat64);
}

TEST(PathScheme, Float32AgreesWithFloat64AtEveryLength) {
  // The chunked computation in float32 against itself in float64 at long lengths, where
  // a query is carried over up to 16 chunks. A logit is at most 20 stages deep (a solve,
  // a product inside its chunk, one carry per chunk crossed), each a float32 sum of at most
  // 32 terms adding about kFloat32Sum relative to |q||k| ~ Dh; added up in the worst case,
  // 20 kFloat32Sum Dh. Measured on random draws (the same computation in scripts/bench_eager.py):
  // 2e-6 at 64, 4e-6 at 512 and 5e-6 at 1024.
  for (const int64_t L : {64, 512}) {
    auto path = random_path(true);
    auto q = torch::randn({1, kHeads, L, kDh}, torch::kFloat64);
    auto k = torch::randn({1, kHeads, L, kDh}, torch::kFloat64);
    auto exact = scheme_logits(path, q, k)[0].tril();
    path->to(torch::kFloat32);
    auto single = scheme_logits(path, q.to(torch::kFloat32), k.to(torch::kFloat32))[0].tril().to(torch::kFloat64);
    const double scale = kDh;  // |q||k| for unit-variance entries
    EXPECT_LE((single - exact).abs().max().item<double>(), 20 * tolerance::kFloat32Sum * scale) << "L=" << L;
  }
}

}  // namespace POSENC_TEST_UNIT
