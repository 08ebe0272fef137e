// CUDA: every scheme computes on the GPU what it computes on the CPU, the fused
// path agrees with the explicit one there, bf16 autocast training learns, and a
// checkpoint written on the GPU evaluates on the CPU. Each test skips, saying
// why, where this LibTorch build sees no CUDA device (CI has none:
// scripts/gpu-check.sh runs them on a GPU machine).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <iomanip>
#include <sstream>

#include "cli_helpers.h"
#include "fused_check.h"
#include "helpers.h"
#include "posenc/compat.h"
#include "posenc/util/batched_matmul.h"
#include "posenc/train/fused_adamw.h"
#include "posenc/train/checkpoint.h"
#include "posenc/tasks/task.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/trainer.h"
#include "posenc/model/encoder.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::config_with;
using posenc::testing::fresh_dir;
using posenc::testing::logged_losses;
using posenc::testing::relative_error;
namespace fs = std::filesystem;

#define POSENC_REQUIRE_CUDA()                                                 \
  if (!torch::cuda::is_available())                                           \
  GTEST_SKIP() << "no CUDA device visible to this LibTorch " << TORCH_VERSION \
               << " build (run scripts/gpu-check.sh on a GPU machine)"

namespace {

/// The tiny run of helpers.h on the GPU.
Config small_cuda_config(const fs::path& dir, std::initializer_list<std::string> extra) {
  std::vector<std::string> overrides = {"train.log_every=50", "train.device=\"cuda\""};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return posenc::testing::small_config(dir, overrides);
}

/// What a finished run left that two runs are compared by (its directory is removed).
struct RunRecord {
  std::vector<torch::Tensor> parameters;  ///< the checkpoint's, in model order
  std::map<int64_t, double> losses;       ///< step -> logged loss
};

RunRecord take_record(const fs::path& dir) {
  RunRecord r{posenc::testing::parameters_of((dir / "checkpoint.pt").string()), logged_losses(dir)};
  fs::remove_all(dir);
  return r;
}

/// Expects two runs' parameters equal bit for bit; a failure says where their
/// logged losses first part: at step 1 the first forward and backward already
/// differ; later, something that carries from step to step.
void expect_equal_bit_for_bit(const RunRecord& a, const RunRecord& b, const std::string& what) {
  std::string parted = "their logged losses are equal at every logged step";
  for (const auto& [step, loss] : a.losses) {
    const auto other = b.losses.find(step);
    if (other != b.losses.end() && other->second == loss) continue;
    std::ostringstream where;
    where << std::setprecision(17) << "their logged losses first differ at step " << step << ": " << loss
          << " against ";
    if (other == b.losses.end())
      where << "none";
    else
      where << other->second;
    parted = where.str();
    break;
  }
  ASSERT_EQ(a.parameters.size(), b.parameters.size()) << what;
  for (size_t i = 0; i < a.parameters.size(); ++i)
    EXPECT_TRUE(torch::equal(a.parameters[i], b.parameters[i])) << what << ": parameter " << i << "; " << parted;
}

}  // namespace

class CudaEveryScheme : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEveryScheme, ForwardAndBackwardMatchTheCpu) {
  POSENC_REQUIRE_CUDA();
  for (const char* pooling : {"max", "cls"}) {
    torch::manual_seed(3);
    const Config c = config_with({"model.positional.type=\"" + GetParam() + "\"", "model.dropout=0",
                                  std::string("model.pooling=\"") + pooling + "\""});
    Encoder cpu(c.model, task_vocab_size(c.task)), gpu(c.model, task_vocab_size(c.task));
    {
      torch::NoGradGuard no_grad;
      auto src = cpu->parameters(), dst = gpu->parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
    gpu->to(torch::kCUDA);
    const auto tokens = torch::randint(1, task_vocab_size(c.task) + 1, {4, 20}, torch::kLong);
    auto a = cpu->forward(tokens);
    auto b = gpu->forward(tokens.to(torch::kCUDA));
    ASSERT_TRUE(b.is_cuda());
    EXPECT_LE(relative_error(b.cpu(), a), tolerance::kFloat32Model) << GetParam() << " " << pooling << ": logits";
    a.pow(2).sum().backward();
    b.pow(2).sum().backward();
    const auto ga = cpu->named_parameters(), gb = gpu->named_parameters();
    for (size_t i = 0; i < ga.size(); ++i) {
      const auto& pa = ga[i].value();
      const auto& pb = gb[i].value();
      ASSERT_EQ(pa.grad().defined(), pb.grad().defined()) << ga[i].key();
      if (!pa.grad().defined()) continue;
      ASSERT_TRUE(pb.grad().is_cuda()) << ga[i].key();
      EXPECT_LE(relative_error(pb.grad().cpu(), pa.grad()), tolerance::kFloat32Gradient)
          << GetParam() << " " << pooling << ": " << ga[i].key();
    }
  }
}

TEST_P(CudaEveryScheme, DeterministicKernelsMakeTwoRunsEqualBitForBit) {
  // Without train.deterministic two CUDA runs of one config differ in the last
  // bits (kernels that add with atomics); with it they must not, or the run
  // must stop naming the operation that has no deterministic kernel.
  POSENC_REQUIRE_CUDA();
  // Two pairs of runs. Logging every step reads the loss back, so the host
  // waits for the GPU at each step and the log says at which step the runs
  // part; logging only at the end lets the host run ahead of the GPU, as in a
  // user's run. A pair that parts only without the waits points at the host
  // and device racing, not at a kernel.
  for (const int log_every : {1, 50}) {
    std::vector<RunRecord> runs;
    for (const char* name : {"det_a", "det_b"}) {
      const fs::path dir = fresh_dir(std::string(name) + "_" + GetParam());
      auto c =
          small_cuda_config(dir, {"model.positional.type=\"" + GetParam() + "\"", "train.steps=12", "model.dropout=0.1",
                                  "train.checkpoint_every=12", "train.log_every=" + std::to_string(log_every)});
      c.train.deterministic = true;
      TrainRequest opts;
      opts.skip_final_eval = true;
      train(c, opts);
      runs.push_back(take_record(dir));
    }
    expect_equal_bit_for_bit(runs[0], runs[1], GetParam() + " logging every " + std::to_string(log_every) + " steps");
  }
}

TEST(Cuda, DeterministicRunsInTheirOwnProcessesAreEqualBitForBit) {
  // As a user runs them: two `posenc train` processes, each setting up CUDA
  // (and cuBLAS's workspace) with train.deterministic from its start. The
  // in-process case above found none and sinusoidal parting on an H200 with
  // the GPU shared; this one tells process state from the kernels.
  POSENC_REQUIRE_CUDA();
  for (const std::string scheme : {"none", "sinusoidal"}) {
    std::vector<RunRecord> runs;
    for (const char* name : {"cli_det_a", "cli_det_b"}) {
      const fs::path dir = fresh_dir(std::string(name) + "_" + scheme);
      const auto run = posenc::testing::run_cli(
          "train " + std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json --no-progress --device cuda --out " +
          dir.string() + " --set 'model.positional.type=\"" + scheme +
          "\"' --set model.d_model=32 --set model.heads=2 --set model.layers=2 --set model.d_ff=64"
          " --set model.dropout=0.1 --set train.steps=12 --set train.batch_size=32 --set train.log_every=1"
          " --set train.checkpoint_every=12 --set train.eval_every=1000 --set train.val_samples=200"
          " --set train.deterministic=true --set 'eval.lengths=[8]' --set eval.samples_per_length=64");
      ASSERT_EQ(run.code, 0) << run.output;
      runs.push_back(take_record(dir));
    }
    ASSERT_EQ(runs[0].losses.size(), 12u);
    EXPECT_EQ(runs[0].losses, runs[1].losses) << scheme << ": the logged losses differ";
    expect_equal_bit_for_bit(runs[0], runs[1], scheme);
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, CudaEveryScheme, ::testing::ValuesIn(scheme_names()),
                         [](const auto& info) { return info.param; });

TEST(Cuda, FusedAndExplicitAttentionAgree) {
  POSENC_REQUIRE_CUDA();
  if (!compat::kHasSdpa) GTEST_SKIP() << "this LibTorch has no scaled_dot_product_attention";
  for (const auto& scheme : posenc::testing::fused_path_schemes())
    for (bool bf16 : {false, true}) posenc::testing::expect_fused_matches_explicit(scheme, torch::kCUDA, bf16);
}

TEST(Cuda, CpuOnlyKernelsNeverSeeCudaTensors) {
  POSENC_REQUIRE_CUDA();
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  auto a = torch::randn({8, 16, 16}, opts), b = torch::randn({8, 16, 16}, opts);
  EXPECT_FALSE(uses_small_matmul_kernel(a, b));
  EXPECT_TRUE(torch::allclose(batched_matmul(a, b).cpu(), torch::matmul(a.cpu(), b.cpu()), tolerance::kFloat32Model,
                              tolerance::kFloat32Sum));

  // FusedAdamW falls back to torch's AdamW on CUDA: the same step as on the CPU.
  torch::manual_seed(2);
  auto p_cpu = torch::randn({5, 7}).requires_grad_(), p_gpu = p_cpu.detach().to(torch::kCUDA).requires_grad_();
  FusedAdamW cpu_opt({p_cpu}, torch::optim::AdamWOptions(1e-2)), gpu_opt({p_gpu}, torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < 3; ++step) {
    const auto g = torch::randn({5, 7});
    p_cpu.mutable_grad() = g.clone();
    p_gpu.mutable_grad() = g.to(torch::kCUDA);
    cpu_opt.step();
    gpu_opt.step();
  }
  EXPECT_TRUE(p_gpu.is_cuda());
  EXPECT_LE(relative_error(p_gpu.detach().cpu(), p_cpu.detach()), tolerance::kFloat32Sum);
}

TEST(Cuda, Bf16AutocastTrainingLearns) {
  POSENC_REQUIRE_CUDA();
  const auto dir = fresh_dir("bf16");
  TrainRequest opts;
  const auto r = train(
      small_cuda_config(dir, {"train.steps=400", "model.positional.type=\"rope\"", "train.precision=\"bf16\""}), opts);
  EXPECT_GT(r.val_accuracy, 0.75) << "bf16 RoPE on CUDA should learn in-distribution ordering (chance: 0.5)";
  fs::remove_all(dir);
}

TEST(Cuda, CheckpointWrittenOnCudaEvaluatesOnCpuAndResumesThere) {
  POSENC_REQUIRE_CUDA();
  const auto dir = fresh_dir("ckpt");
  TrainRequest opts;
  opts.skip_final_eval = true;
  const Config cfg =
      small_cuda_config(dir, {"train.steps=200", "model.positional.type=\"alibi\"", "model.dropout=0.1"});
  train(cfg, opts);
  const std::string ckpt = (dir / "checkpoint.pt").string();

  Config stored;
  auto on_gpu = load_model(ckpt, torch::kCUDA, &stored);
  auto on_cpu = load_model(ckpt, torch::kCPU);
  EXPECT_TRUE(on_gpu->parameters().front().is_cuda());
  EXPECT_TRUE(on_cpu->parameters().front().is_cpu());
  const auto task = make_task(stored.task);
  const auto gpu_results = evaluate_lengths(on_gpu, *task, evaluation_spec(stored), stored.eval.lengths, torch::kCUDA);
  const auto cpu_results = evaluate_lengths(on_cpu, *task, evaluation_spec(stored), stored.eval.lengths, torch::kCPU);
  ASSERT_EQ(gpu_results.size(), cpu_results.size());
  for (size_t i = 0; i < gpu_results.size(); ++i) {
    // Float32 on two devices: at most one borderline example may flip.
    EXPECT_LE(std::abs(gpu_results[i].total.correct - cpu_results[i].total.correct), 1)
        << "length " << gpu_results[i].length;
    EXPECT_EQ(gpu_results[i].total.n, cpu_results[i].total.n);
  }

  // The run continues on the CPU (with a fresh dropout stream, said in a warning).
  opts.resume = true;
  auto cpu_cfg = cfg;
  cpu_cfg.train.device = posenc::Device::Cpu;
  cpu_cfg.train.steps = 220;
  const auto resumed = train(cpu_cfg, opts);
  EXPECT_EQ(resumed.steps, 220);
  EXPECT_TRUE(load_model(ckpt, torch::kCPU)->parameters().front().is_cpu());
  fs::remove_all(dir);
}

}  // namespace POSENC_TEST_UNIT
