// FusedAdamW must follow torch::optim::AdamW step for step, share its state
// format (checkpoints), and hand everything it does not fuse back to it.
#include <gtest/gtest.h>

#include <sstream>

#include <torch/torch.h>

#include "tolerances.h"
#include "posenc/train/fused_adamw.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

namespace {

/// Two groups as the trainer makes them: matrices with weight decay, vectors without.
std::vector<torch::Tensor> make_params(torch::Dtype dtype = torch::kFloat, torch::Device device = torch::kCPU) {
  torch::manual_seed(11);
  const auto o = torch::dtype(dtype);
  return {torch::randn({16, 8}, o).to(device).requires_grad_(), torch::randn({40000}, o).to(device).requires_grad_(),
          torch::randn({8}, o).to(device).requires_grad_()};
}

template <class Opt>
Opt make_optimizer(const std::vector<torch::Tensor>& p, bool amsgrad = false) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto decay = std::make_unique<torch::optim::AdamWOptions>(3e-3);
  decay->weight_decay(0.1).amsgrad(amsgrad);
  auto no_decay = std::make_unique<torch::optim::AdamWOptions>(3e-3);
  no_decay->weight_decay(0.0).amsgrad(amsgrad);
  groups.emplace_back(std::vector<torch::Tensor>{p[0], p[1]}, std::move(decay));
  groups.emplace_back(std::vector<torch::Tensor>{p[2]}, std::move(no_decay));
  return Opt(std::move(groups), torch::optim::AdamWOptions(3e-3));
}

/// Deterministic gradients for step t (the same for both optimizers).
void set_grads(const std::vector<torch::Tensor>& params, int t, bool strided = false) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto g = torch::sin(torch::arange(params[i].numel(), params[i].options().requires_grad(false)) * 0.37 +
                        static_cast<double>(t + i))
                 .view(params[i].sizes());
    if (t % 3 == 0) g = g * 1e-3;                             // small gradients: eps and the bias corrections matter
    if (strided && g.dim() == 2) g = g.t().contiguous().t();  // same values, not contiguous
    params[i].mutable_grad() = g;
  }
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& what) {
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], tolerance::kFloat32Sum, tolerance::kFloat32Value))
        << what << ": parameter " << i << " max diff " << (a[i] - b[i]).abs().max().item<double>();
}

/// An optimizer's state as a checkpoint would hold it.
std::string saved_state(torch::optim::Optimizer& opt) {
  torch::serialize::OutputArchive out;
  opt.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  return bytes.str();
}

void load_state(torch::optim::Optimizer& opt, const std::string& bytes) {
  std::istringstream in_bytes(bytes);
  torch::serialize::InputArchive in;
  in.load_from(in_bytes);
  opt.load(in);
}

template <class A, class B>
void run_both(std::vector<torch::Tensor>& pa, A& oa, std::vector<torch::Tensor>& pb, B& ob, int from, int to,
              bool strided = false) {
  for (int t = from; t < to; ++t) {
    set_grads(pa, t, strided);
    set_grads(pb, t, strided);
    oa.step();
    ob.step();
  }
}

}  // namespace

TEST(FusedAdamW, FollowsTorchAdamWStepForStep) {
  auto reference = make_params(), fused = make_params();
  auto ref_opt = make_optimizer<torch::optim::AdamW>(reference);
  auto fused_opt = make_optimizer<posenc::FusedAdamW>(fused);
  run_both(reference, ref_opt, fused, fused_opt, 0, 30);
  expect_close(fused, reference, "30 steps");
  // The parameters moved: the test would notice an optimizer that does nothing.
  EXPECT_GT((fused[0] - make_params()[0]).abs().max().item<double>(), 1e-2);
}

TEST(FusedAdamW, StateLoadsInTorchAdamWAndBack) {
  auto a = make_params(), b = make_params();
  auto fused = make_optimizer<posenc::FusedAdamW>(a);
  auto reference = make_optimizer<torch::optim::AdamW>(b);
  run_both(a, fused, b, reference, 0, 5);
  // Fused state into a torch AdamW, and torch state into a FusedAdamW (as a checkpoint round trip).
  auto loaded_ref = make_optimizer<torch::optim::AdamW>(a);
  auto loaded_fused = make_optimizer<posenc::FusedAdamW>(b);
  load_state(loaded_ref, saved_state(fused));
  load_state(loaded_fused, saved_state(reference));
  run_both(a, loaded_ref, b, loaded_fused, 5, 15);
  expect_close(a, b, "after swapping states");
}

TEST(FusedAdamW, HandsWhatItDoesNotFuseToTorchAdamW) {
  {  // float64
    auto reference = make_params(torch::kDouble), fused = make_params(torch::kDouble);
    auto ref_opt = make_optimizer<torch::optim::AdamW>(reference);
    auto fused_opt = make_optimizer<posenc::FusedAdamW>(fused);
    run_both(reference, ref_opt, fused, fused_opt, 0, 10);
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(torch::equal(fused[i], reference[i])) << "float64 " << i;
  }
  {  // amsgrad
    auto reference = make_params(), fused = make_params();
    auto ref_opt = make_optimizer<torch::optim::AdamW>(reference, true);
    auto fused_opt = make_optimizer<posenc::FusedAdamW>(fused, true);
    run_both(reference, ref_opt, fused, fused_opt, 0, 10);
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(torch::equal(fused[i], reference[i])) << "amsgrad " << i;
  }
  {  // non-contiguous gradients
    auto reference = make_params(), fused = make_params();
    auto ref_opt = make_optimizer<torch::optim::AdamW>(reference);
    auto fused_opt = make_optimizer<posenc::FusedAdamW>(fused);
    run_both(reference, ref_opt, fused, fused_opt, 0, 10, /*strided=*/true);
    expect_close(fused, reference, "strided gradients");
  }
}

// On CUDA, step() is ATen's multi-tensor fused kernel (LibTorch 2.4+): the
// same update as torch::optim::AdamW's ten ops per tensor, to float32 rounding,
// and the same state, so a checkpoint continues in either.
TEST(FusedAdamW, OnCudaFollowsTorchAdamWStepForStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto reference = make_params(torch::kFloat, torch::kCUDA), fused = make_params(torch::kFloat, torch::kCUDA);
  auto ref_opt = make_optimizer<torch::optim::AdamW>(reference);
  auto fused_opt = make_optimizer<posenc::FusedAdamW>(fused);
  run_both(reference, ref_opt, fused, fused_opt, 0, 30);
  expect_close(fused, reference, "30 steps on CUDA");
  EXPECT_GT((fused[0] - make_params(torch::kFloat, torch::kCUDA)[0]).abs().max().item<double>(), 1e-2);
  auto resumed = make_optimizer<torch::optim::AdamW>(fused);
  load_state(resumed, saved_state(fused_opt));
  run_both(reference, ref_opt, fused, resumed, 30, 35);
  expect_close(fused, reference, "the fused state continued in torch AdamW");
}

}  // namespace POSENC_TEST_UNIT
