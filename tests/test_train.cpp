// Trainer: schedule, Wilson intervals, checkpoint round trip, bit-for-bit
// resume, and a short run that must learn.
#include <gtest/gtest.h>

#include <ATen/Context.h>

#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/grad_clip.h"
#include "posenc/train/schedule.h"
#include "posenc/train/trainer.h"
#include "posenc/model/encoder.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::config_with;
namespace fs = std::filesystem;

using posenc::testing::fresh_dir;
using posenc::testing::kBitExactDevice;
using posenc::testing::parameters_of;
using posenc::testing::small_config;

TEST(Schedule, WarmupThenCosineToTheFloor) {
  EXPECT_DOUBLE_EQ(learning_rate(0, 1000, 1e-3, 100, 0.1), 1e-5);
  EXPECT_DOUBLE_EQ(learning_rate(99, 1000, 1e-3, 100, 0.1), 1e-3);
  EXPECT_NEAR(learning_rate(550, 1000, 1e-3, 100, 0.1), 0.55e-3,
              tolerance::kFloat64Closed);  // halfway: mean of lr and floor
  EXPECT_NEAR(learning_rate(1000, 1000, 1e-3, 100, 0.1), 1e-4, tolerance::kFloat64Closed);
  for (int64_t s = 100; s < 999; ++s)
    EXPECT_GE(learning_rate(s, 1000, 1e-3, 100, 0.1), learning_rate(s + 1, 1000, 1e-3, 100, 0.1));
}

TEST(GradClip, MatchesTorchClipGradNormWithTheNormLeftOnTheDevice) {
  for (const double max_norm : {0.5, 1e6}) {  // clipping, and a bound no gradient reaches
    torch::manual_seed(9);
    std::vector<torch::Tensor> ours, theirs;
    for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 4}, {7}, {2, 2, 2}}) {
      auto p = torch::randn(shape).requires_grad_();
      p.mutable_grad() = torch::randn(shape) * 3;
      auto q = p.detach().clone().requires_grad_();
      q.mutable_grad() = p.grad().clone();
      ours.push_back(p);
      theirs.push_back(q);
    }
    ours.push_back(torch::randn({2}).requires_grad_());  // no gradient: skipped
    const torch::Tensor norm = posenc::clip_grad_norm(ours, max_norm);
    const double expected = torch::nn::utils::clip_grad_norm_(theirs, max_norm);
    EXPECT_EQ(norm.dim(), 0);
    EXPECT_NEAR(norm.item<double>(), expected,
                tolerance::kFloat32Sum * expected);  // a float32 norm summed in another order
    for (size_t i = 0; i < theirs.size(); ++i)
      EXPECT_TRUE(torch::allclose(ours[i].grad(), theirs[i].grad(), tolerance::kFloat32Value, tolerance::kFloat32Value))
          << "max_norm " << max_norm;
    if (max_norm > 1) {
      EXPECT_GT(norm.item<double>(), 1.0);  // really a no-clip case
    }
  }
}

TEST(Evaluate, WilsonIntervalMatchesTheFormula) {
  const auto a = wilson_interval(50, 100);
  EXPECT_NEAR(a.lo, 0.4038, tolerance::kPrinted4);
  EXPECT_NEAR(a.hi, 0.5962, tolerance::kPrinted4);
  const auto b = wilson_interval(100, 100);  // never a zero-width interval at the edge
  EXPECT_NEAR(b.hi, 1.0, tolerance::kFloat64Closed);
  EXPECT_NEAR(b.lo, 0.9630, tolerance::kPrinted4);
}

TEST(Checkpoint, RoundTripGivesTheSameFunction) {
  const auto dir = fresh_dir("ckpt");
  const Config cfg = small_config(dir);
  torch::manual_seed(4);
  Transformer model(cfg.model, task_vocab_size(cfg.task));
  model->eval();
  save_checkpoint((dir / "c.pt").string(), model, nullptr, 7, cfg);
  Config loaded_cfg;
  auto loaded = load_model((dir / "c.pt").string(), torch::kCPU, &loaded_cfg);
  EXPECT_EQ(config_to_json(loaded_cfg), config_to_json(cfg));
  auto tokens = torch::randint(1, 17, {3, 8}, torch::kLong);
  EXPECT_TRUE(torch::equal(classifier_of(model, "the test").forward(tokens),
                           classifier_of(loaded, "the test").forward(tokens)));
  // A model-only checkpoint cannot resume training.
  torch::optim::AdamW opt(model->parameters());
  EXPECT_THROW(load_checkpoint((dir / "c.pt").string(), model, &opt), ConfigError);
}

TEST(Checkpoint, GarbageAndMissingFilesAreClearErrors) {
  const auto dir = fresh_dir("garbage");
  fs::create_directories(dir);
  std::ofstream(dir / "bad.pt") << "not a checkpoint";
  try {
    read_checkpoint_config((dir / "bad.pt").string());
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.pt: not a posenc checkpoint"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_checkpoint_config((dir / "none.pt").string()), ConfigError);
}

TEST(Train, ResumeContinuesBitForBit) {
  // Dropout on, so the checkpointed RNG state matters.
  const auto straight = fresh_dir("straight"), split = fresh_dir("split");
  const std::initializer_list<std::string> run = {"train.steps=40", "train.checkpoint_every=20", "model.dropout=0.1",
                                                  kBitExactDevice};
  TrainRequest opts;
  opts.skip_final_eval = true;
  train(small_config(straight, run), opts);

  opts.stop_at_step = 20;  // the same run, interrupted after its step-20 checkpoint
  train(small_config(split, run), opts);
  EXPECT_FALSE(fs::exists(split / "results.json"));
  opts.stop_at_step = 0;
  // Without --resume an existing run is never overwritten.
  EXPECT_THROW(train(small_config(split, run), opts), ConfigError);
  opts.resume = true;
  // A changed model is refused on resume, naming the key.
  try {
    train(small_config(split, {"train.steps=40", "train.checkpoint_every=20", "model.dropout=0.2", kBitExactDevice}),
          opts);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/model/dropout"), std::string::npos) << e.what();
  }
  train(small_config(split, run), opts);

  auto a = parameters_of((straight / "checkpoint.pt").string());
  auto b = parameters_of((split / "checkpoint.pt").string());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  // The metrics of both runs agree line for line.
  auto read = [](const fs::path& f) {
    std::vector<double> losses;
    std::ifstream in(f);
    for (std::string line; std::getline(in, line);) {
      auto j = json::parse(line);
      if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    }
    return losses;
  };
  EXPECT_EQ(read(straight / "metrics.jsonl"), read(split / "metrics.jsonl"));
}

TEST(Train, DeterministicKernelsChangeNothingOnTheCpuAndEndWithTheRun) {
  // The CPU's kernels are deterministic already: train.deterministic must not
  // change what a run computes there (no other seed, no other data), is kept in
  // the run's config.json only where set, and leaves LibTorch's mode as it found it.
  const auto plain = fresh_dir("det_plain"), det = fresh_dir("det_on");
  const std::initializer_list<std::string> run = {"train.steps=20", "model.dropout=0.1", kBitExactDevice};
  TrainRequest opts;
  opts.skip_final_eval = true;
  ASSERT_FALSE(at::globalContext().deterministicAlgorithms());
  train(small_config(plain, run), opts);
  auto with = small_config(det, run);
  with.train.deterministic = true;
  train(with, opts);
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms()) << "the run left deterministic mode on";
  const auto a = parameters_of((plain / "checkpoint.pt").string()), b = parameters_of((det / "checkpoint.pt").string());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  EXPECT_FALSE(read_json_file((plain / "config.json").string())["train"].contains("deterministic"));
  EXPECT_EQ(read_json_file((det / "config.json").string())["train"].value("deterministic", false), true);
}

TEST(Train, AverageFromScoresTheMeanOfTheCheckpointStepsAndSurvivesStops) {
  const auto straight = fresh_dir("average_straight"), split = fresh_dir("average_split");
  const std::initializer_list<std::string> run = {"train.steps=40", "train.checkpoint_every=10",
                                                  "train.average_from=20", "model.dropout=0.1", kBitExactDevice};
  TrainRequest opts;
  opts.skip_final_eval = true;
  train(small_config(straight, run), opts);
  const auto results = read_json_file((straight / "results.json").string());
  EXPECT_EQ(results["averaged_weights"]["checkpoints"], 3) << results.dump();  // steps 20, 30, 40

  // The same run stopped at 20, at 25 (no checkpoint step: not in the mean) and at 30, then resumed to the end.
  std::vector<std::vector<torch::Tensor>> at;  // the weights at steps 20, 30, 40
  for (const int64_t stop : {20, 25, 30, 0}) {
    opts.stop_at_step = stop;
    train(small_config(split, run), opts);
    opts.resume = true;
    if (stop != 25) at.push_back(parameters_of((split / "checkpoint.pt").string()));
  }
  const auto mean = parameters_of((straight / "average.pt").string());
  const auto resumed = parameters_of((split / "average.pt").string());
  ASSERT_EQ(mean.size(), at[0].size());
  for (size_t i = 0; i < mean.size(); ++i) {
    // A resumed run continues the running mean exactly.
    EXPECT_TRUE(torch::equal(mean[i], resumed[i])) << "parameter " << i;
    // The running mean of three float32 terms is their mean to a few roundings of the weights' size.
    const auto direct = (at[0][i] + at[1][i] + at[2][i]) / 3.0;
    EXPECT_TRUE(torch::allclose(mean[i], direct, 1e-5, 1e-6)) << "parameter " << i;
  }
  EXPECT_FALSE(torch::equal(mean[0], at[2][0])) << "the mean is not the last weights";
  EXPECT_THROW(small_config(fresh_dir("average_late"), {"train.steps=40", "train.average_from=50"}), ConfigError);
}

TEST(Train, ShortRunLearnsTheTask) {
  const auto dir = fresh_dir("learns");
  TrainRequest opts;
  const auto result = train(small_config(dir, {"train.steps=400", "model.positional.type=rope"}), opts);
  EXPECT_GT(result.val_accuracy, 0.8) << "a short RoPE run should be well above chance";
  ASSERT_EQ(result.lengths.size(), 2u);
  EXPECT_GT(result.lengths[0].total.accuracy(), 0.75);
  EXPECT_TRUE(fs::exists(dir / "results.json"));
  EXPECT_TRUE(fs::exists(dir / "config.json"));
  const auto stored = config_from_json(read_json_file((dir / "config.json").string()));
  EXPECT_EQ(stored.train.steps, 400);
  std::ifstream metrics(dir / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, 40 + 1);  // 40 log lines + the final validation line
}

}  // namespace POSENC_TEST_UNIT
