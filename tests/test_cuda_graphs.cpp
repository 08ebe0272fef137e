// CUDA graphs (train.cuda_graphs): the device-side AdamW update that a graph
// captures equals FusedAdamW::step (on the CPU, everywhere); on a GPU, training
// with graphs and without gives the same losses and weights for every scheme,
// a run resumes across the two modes, and `on` refuses what it cannot capture.
// The GPU tests skip where this LibTorch build sees no CUDA device or this
// posenc was built without graph support (scripts/gpu-check.sh runs them).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "posenc/tasks/task.h"
#include "posenc/errors.h"
#include "posenc/train/cuda_graphs.h"
#include "posenc/train/fused_adamw.h"
#include "posenc/train/grad_clip.h"
#include "posenc/train/objective.h"
#include "posenc/train/trainer.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::error_of;
using posenc::testing::fresh_dir;
using posenc::testing::logged_losses;
using posenc::testing::parameters_of;
using posenc::testing::small_config;
namespace fs = std::filesystem;

#define POSENC_REQUIRE_CUDA_GRAPHS()                                                             \
  if (!torch::cuda::is_available() || !cuda_graphs_compiled())                                   \
  GTEST_SKIP() << "needs a CUDA device and a build with -DPOSENC_CUDA=ON (CUDA device visible: " \
               << torch::cuda::is_available() << ", graphs compiled: " << cuda_graphs_compiled() << ")"

namespace {

/// Two parameter groups (decay and none), as make_optimizer builds them.
FusedAdamW optimizer_for(const std::vector<torch::Tensor>& decayed, const std::vector<torch::Tensor>& plain) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed,
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-3).weight_decay(0.1)));
  groups.emplace_back(plain,
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-3).weight_decay(0.0)));
  return FusedAdamW(groups, torch::optim::AdamWOptions(1e-3));
}

void set_lr(FusedAdamW& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

/// max |a - b| over all parameters, relative to max |a|.
double relative_weight_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, (a[i] - b[i]).abs().max().item<double>());
    scale = std::max(scale, a[i].abs().max().item<double>());
  }
  return diff / std::max(scale, 1e-12);
}

Config graph_config(const fs::path& dir, const std::string& scheme, const std::string& graphs) {
  // Lengths 6-9: four shapes, so 50 steps capture each and replay it many times.
  return small_config(
      dir, {"model.positional.type=\"" + scheme + "\"", "train.device=\"cuda\"", "train.cuda_graphs=\"" + graphs + "\"",
            "train.steps=50", "task.min_length=6", "task.max_length=9", "model.dropout=0"});
}

TrainRequest quiet(int64_t stop_at = 0, bool resume = false) {
  TrainRequest r;
  r.skip_final_eval = true;
  r.stop_at_step = stop_at;
  r.resume = resume;
  return r;
}

}  // namespace

TEST(CudaGraphs, DeviceSideAdamWEqualsTheHostStep) {
  // The update a graph captures (lr and step count read from tensors) against
  // FusedAdamW::step, over steps with a changing learning rate.
  torch::manual_seed(0);
  std::vector<torch::Tensor> a = {torch::randn({5, 7}), torch::randn({7})};
  std::vector<torch::Tensor> b = {a[0].clone(), a[1].clone()};
  for (auto& t : a) t.requires_grad_(true);
  for (auto& t : b) t.requires_grad_(true);
  FusedAdamW host = optimizer_for({a[0]}, {a[1]});
  FusedAdamW device = optimizer_for({b[0]}, {b[1]});
  auto lr = torch::zeros({}), t = torch::zeros({});
  for (int step = 0; step < 6; ++step) {
    const double rate = 1e-2 * (step + 1);
    for (size_t i = 0; i < a.size(); ++i) {
      const auto g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    set_lr(host, rate);
    host.step();
    lr.fill_(rate);
    t.fill_(static_cast<double>(device.steps_taken() + 1));
    device.prepare_device_steps();
    device.step_on_device(lr, t);
    device.count_device_step();
  }
  EXPECT_EQ(device.steps_taken(), 6);
  EXPECT_EQ(host.steps_taken(), 6);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], tolerance::kFloat32Sum, tolerance::kFloat32Value))
        << "parameter " << i << " differs by " << (a[i] - b[i]).abs().max().item<double>();
}

TEST(CudaGraphs, TheCapturedStepEqualsTheEagerStepOnTheCpu) {
  // device_step (what a graph captures) against the trainer's eager sequence:
  // zero_grad, objective, backward, clip, FusedAdamW::step.
  const Config c = posenc::testing::config_with({"model.dropout=0", "model.layers=2", "model.d_model=32"});
  torch::manual_seed(1);
  Transformer a(c.model, task_vocab_size(c.task));
  torch::manual_seed(1);
  Transformer b(c.model, task_vocab_size(c.task));
  FusedAdamW eager = make_optimizer(a, c.train), captured = make_optimizer(b, c.train);
  const auto task = make_task(c.task);
  auto lr = torch::zeros({}), t = torch::zeros({});
  for (int64_t step = 0; step < 4; ++step) {
    const TaskBatch batch = task->train_batch(step, 16, 0);
    const double rate = 1e-3 * (step + 1);
    for (auto& g : eager.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(rate);
    eager.zero_grad();
    const auto out = task_objective(a, batch);
    out.loss.backward();
    clip_grad_norm(a->parameters(), c.train.grad_clip);
    eager.step();
    lr.fill_(rate);
    t.fill_(static_cast<double>(captured.steps_taken() + 1));
    torch::Tensor norm;
    const auto got = device_step(b, batch, scored_predictions(batch), captured, lr, t, c.train.grad_clip, false, norm);
    captured.count_device_step();
    EXPECT_NEAR(got.loss.item<double>(), out.loss.item<double>(), tolerance::kFloat32Sum) << "step " << step;
  }
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::allclose(pa[i], pb[i], tolerance::kFloat32Model, tolerance::kFloat32Value)) << "parameter " << i;
}

TEST(CudaGraphs, TheKeyTakesAutoOnOrOff) {
  EXPECT_EQ(posenc::testing::config_with({}).train.cuda_graphs, posenc::CudaGraphs::Auto);
  EXPECT_EQ(posenc::testing::config_with({"train.cuda_graphs=\"off\""}).train.cuda_graphs, posenc::CudaGraphs::Off);
  const std::string e = error_of([] { posenc::testing::config_with({"train.cuda_graphs=\"always\""}); });
  EXPECT_NE(e.find("train.cuda_graphs"), std::string::npos) << e;
  for (const char* choice : {"auto", "on", "off"}) EXPECT_NE(e.find(choice), std::string::npos) << e;
}

TEST(CudaGraphs, OnRefusesWhatItCannotCapture) {
  const fs::path dir = fresh_dir("graphs_refused");
  const std::string cpu = error_of([&] {
    train(small_config(dir, {"train.device=\"cpu\"", "train.cuda_graphs=\"on\"", "train.steps=2"}), quiet());
  });
  EXPECT_NE(cpu.find("train.cuda_graphs=on"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("train.device cuda"), std::string::npos) << cpu;
  EXPECT_FALSE(fs::exists(dir / "checkpoint.pt"));
  if (!torch::cuda::is_available() || !cuda_graphs_compiled()) return;
  const std::string randomized = error_of([&] {
    train(small_config(dir, {"train.device=\"cuda\"", "train.cuda_graphs=\"on\"", "train.steps=2",
                             "model.positional.type=\"rope\"", "model.positional.randomize={\"max_position\":64}"}),
          quiet());
  });
  EXPECT_NE(randomized.find("randomized positions"), std::string::npos) << randomized;
  fs::remove_all(dir);
}

class CudaGraphsEveryScheme : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGraphsEveryScheme, GraphedAndEagerTrainingAgree) {
  POSENC_REQUIRE_CUDA_GRAPHS();
  const fs::path eager_dir = fresh_dir("graphs_eager_" + GetParam()),
                 graphed_dir = fresh_dir("graphs_on_" + GetParam());
  const Config eager = graph_config(eager_dir, GetParam(), "off"),
               graphed = graph_config(graphed_dir, GetParam(), "on");
  {
    Transformer probe(graphed.model, task_vocab_size(graphed.task));
    if (!probe->capturable()) {
      EXPECT_NE(error_of([&] { train(graphed, quiet()); }).find("decides on the host"), std::string::npos);
      GTEST_SKIP() << GetParam() << " says it cannot be captured; it trains eagerly";
    }
  }
  train(eager, quiet());
  train(graphed, quiet());
  const auto a = logged_losses(eager_dir), b = logged_losses(graphed_dir);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), a.size());
  // Graphed and eager steps run different kernels (SDPA's, a fused AdamW), so
  // the runs part by rounding that training amplifies: 2e-3 of a logged loss
  // over 5 log lines, as measured on an H100 (docs/gpu/).
  for (const auto& [step, loss] : a) {
    ASSERT_TRUE(b.count(step)) << "no loss logged at step " << step;
    EXPECT_NEAR(b.at(step), loss, 2e-3 * std::abs(loss) + tolerance::kFloat32Sum) << "step " << step;
  }
  EXPECT_LT(relative_weight_difference(parameters_of((eager_dir / "checkpoint.pt").string()),
                                       parameters_of((graphed_dir / "checkpoint.pt").string())),
            2e-3);  // as the losses above
  fs::remove_all(eager_dir);
  fs::remove_all(graphed_dir);
}

INSTANTIATE_TEST_SUITE_P(Registry, CudaGraphsEveryScheme, ::testing::ValuesIn(scheme_names()),
                         [](const auto& info) { return info.param; });

TEST(CudaGraphs, ResumeWorksAcrossGraphedAndEagerSteps) {
  POSENC_REQUIRE_CUDA_GRAPHS();
  // 50 steps eagerly in one go, against 20 graphed + 15 eager + 15 graphed.
  const fs::path whole = fresh_dir("graphs_whole"), pieces = fresh_dir("graphs_pieces");
  train(graph_config(whole, "alibi", "off"), quiet());
  train(graph_config(pieces, "alibi", "on"), quiet(20));
  train(graph_config(pieces, "alibi", "off"), quiet(35, /*resume=*/true));
  train(graph_config(pieces, "alibi", "on"), quiet(0, /*resume=*/true));
  const auto a = logged_losses(whole), b = logged_losses(pieces);
  ASSERT_EQ(b.size(), a.size());
  for (const auto& [step, loss] : a) {
    ASSERT_TRUE(b.count(step)) << "no loss logged at step " << step;
    EXPECT_NEAR(b.at(step), loss, 2e-3 * std::abs(loss) + tolerance::kFloat32Sum) << "step " << step;
  }
  EXPECT_LT(relative_weight_difference(parameters_of((whole / "checkpoint.pt").string()),
                                       parameters_of((pieces / "checkpoint.pt").string())),
            2e-3);  // as the losses above
  fs::remove_all(whole);
  fs::remove_all(pieces);
}

}  // namespace POSENC_TEST_UNIT
