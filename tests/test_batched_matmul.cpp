// batched_matmul: the small-matrix kernel must agree with torch::matmul in
// value and gradient for every layout attention feeds it, and must only be
// taken where it applies.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "tolerances.h"
#include "posenc/compat.h"
#include "posenc/util/batched_matmul.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using posenc::batched_matmul;
using posenc::uses_small_matmul_kernel;

namespace {

/// The float64 product of the same values: an independent reference.
torch::Tensor reference(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::matmul(a.to(torch::kDouble), b.to(torch::kDouble)).to(torch::kFloat);
}

void expect_same_value_and_gradients(const torch::Tensor& a_in, const torch::Tensor& b_in, const std::string& what) {
  ASSERT_TRUE(uses_small_matmul_kernel(a_in, b_in)) << what;
  auto a = a_in.detach().requires_grad_(true), b = b_in.detach().requires_grad_(true);
  auto a2 = a_in.detach().requires_grad_(true), b2 = b_in.detach().requires_grad_(true);
  auto out = batched_matmul(a, b);
  auto expected = torch::matmul(a2, b2);
  ASSERT_EQ(out.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(torch::allclose(out, reference(a_in, b_in), tolerance::kFloat32Sum, tolerance::kFloat32Sum)) << what;
  auto weights = torch::randn_like(expected);
  (out * weights).sum().backward();
  (expected * weights).sum().backward();
  EXPECT_TRUE(torch::allclose(a.grad(), a2.grad(), tolerance::kFloat32Sum, tolerance::kFloat32Sum))
      << what << ": grad a";
  EXPECT_TRUE(torch::allclose(b.grad(), b2.grad(), tolerance::kFloat32Sum, tolerance::kFloat32Sum))
      << what << ": grad b";
}

}  // namespace

TEST(BatchedMatmul, MatchesMatmulOnTheLayoutsAttentionUses) {
  torch::manual_seed(3);
  // q, k, v as attention makes them: chunks of one (B, L, 3D) projection, split into heads.
  const int64_t B = 5, L = 16, H = 4, Dh = 16;
  auto qkv = torch::randn({B, L, 3 * H * Dh}).chunk(3, -1);
  auto split = [&](const torch::Tensor& x) { return x.view({B, L, H, Dh}).transpose(1, 2); };  // (B, H, L, Dh)
  auto q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
  expect_same_value_and_gradients(q, k.transpose(-2, -1), "q·kᵀ");
  auto probs = torch::softmax(torch::randn({B, H, L, L}), -1);
  expect_same_value_and_gradients(probs, v, "p·v");
}

TEST(BatchedMatmul, MatchesMatmulOnOddShapesAndStrides) {
  torch::manual_seed(4);
  // Rows not a multiple of the register block, N not a multiple of 8 (CLS pooling: length 17), 3 to 5 dims.
  expect_same_value_and_gradients(torch::randn({7, 17, 16}), torch::randn({7, 17, 16}).transpose(1, 2), "17 x 17");
  expect_same_value_and_gradients(torch::randn({3, 13, 5}), torch::randn({3, 5, 3}), "13 x 5 · 5 x 3");
  expect_same_value_and_gradients(torch::randn({2, 3, 1, 9}), torch::randn({2, 3, 9, 64}), "one row, N = 64");
  expect_same_value_and_gradients(torch::randn({2, 2, 2, 6, 4}), torch::randn({2, 2, 2, 4, 41}), "5 dims");
  // Expanded (stride 0) batch dims, as a broadcast gradient makes them.
  expect_same_value_and_gradients(torch::randn({1, 8, 8}).expand({4, 8, 8}), torch::randn({4, 8, 8}), "expanded a");
  expect_same_value_and_gradients(torch::randn({4, 8, 8}), torch::randn({8, 1}).expand({4, 8, 8}), "stride-0 b");
}

TEST(BatchedMatmul, TakesTheKernelOnlyWhereItApplies) {
  const auto f = [](std::vector<int64_t> s) { return torch::zeros(s); };
  EXPECT_TRUE(uses_small_matmul_kernel(f({256, 16, 16}), f({256, 16, 16})));
  EXPECT_TRUE(uses_small_matmul_kernel(f({64, 4, 32, 16}), f({64, 4, 16, 32})));
  EXPECT_FALSE(uses_small_matmul_kernel(f({8, 16, 16}), f({8, 16, 65}))) << "N above 64";
  EXPECT_FALSE(uses_small_matmul_kernel(f({8, 128, 32}), f({8, 32, 64}))) << "M·K·N above 2^17";
  EXPECT_FALSE(uses_small_matmul_kernel(f({16, 16}), f({16, 16}))) << "no batch dim";
  EXPECT_FALSE(uses_small_matmul_kernel(f({1, 16, 16}), f({4, 16, 16}))) << "broadcasting";
  EXPECT_FALSE(uses_small_matmul_kernel(f({4, 16, 16}), f({4, 8, 16}))) << "inner sizes differ";
  EXPECT_FALSE(uses_small_matmul_kernel(f({4, 16, 16}).to(torch::kDouble), f({4, 16, 16}).to(torch::kDouble)));
  posenc::compat::set_autocast(at::kCPU, true);
  const bool under_autocast = uses_small_matmul_kernel(f({4, 16, 16}), f({4, 16, 16}));
  posenc::compat::set_autocast(at::kCPU, false);
  EXPECT_FALSE(under_autocast) << "autocast: matmul must run in the autocast dtype";
}

TEST(BatchedMatmul, FallsBackToMatmulElsewhere) {
  torch::manual_seed(5);
  auto a = torch::randn({3, 16, 16}, torch::kDouble), b = torch::randn({3, 16, 16}, torch::kDouble);
  EXPECT_TRUE(torch::equal(batched_matmul(a, b), torch::matmul(a, b)));
  auto wide_a = torch::randn({2, 4, 8}), wide_b = torch::randn({2, 8, 100});
  EXPECT_TRUE(torch::equal(batched_matmul(wide_a, wide_b), torch::matmul(wide_a, wide_b)));
  auto shared = torch::randn({16, 16});  // broadcast over the batch
  EXPECT_TRUE(torch::equal(batched_matmul(a.to(torch::kFloat), shared), torch::matmul(a.to(torch::kFloat), shared)));
}

TEST(BatchedMatmul, WorksInInferenceModeAndWithSeveralThreads) {
  torch::manual_seed(6);
  auto a = torch::randn({64, 16, 16}), b = torch::randn({64, 16, 16});
  const auto expected = reference(a, b);
  {
    c10::InferenceMode guard;
    EXPECT_TRUE(torch::allclose(batched_matmul(a, b), expected, tolerance::kFloat32Sum, tolerance::kFloat32Sum));
  }
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  const auto parallel = batched_matmul(a, b);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::allclose(parallel, expected, tolerance::kFloat32Sum, tolerance::kFloat32Sum));
}

}  // namespace POSENC_TEST_UNIT
