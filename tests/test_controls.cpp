// Controls that separate position from content in the ordering task: value
// windows (how many ties a sequence holds), the numeric token embedding (no
// table row per value), log-sum-exp pooling, and the per-position false alarms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "helpers.h"
#include "posenc/experiments/compare_plan.h"
#include "posenc/model/numeric_embedding.h"
#include "posenc/model/encoder.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/ordering.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/trainer.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::config_with;
using posenc::testing::error_of;

namespace {

std::vector<int64_t> row(const Batch& b, int64_t r) {
  auto t = b.tokens[r].contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

/// max - min + 1 of a row: the width of the values it uses.
int64_t span(const std::vector<int64_t>& r) {
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  return *hi - *lo + 1;
}

}  // namespace

TEST(ValueWindow, TrainingAndEvaluationDrawFromTheirOwnWindows) {
  const auto cfg = config_with({"task.vocab_size=1000", "task.value_window=8", "task.eval_value_window=0"});
  OrderingTask task(cfg.task);
  std::set<int64_t> lows;
  for (int64_t step = 0; step < 20; ++step) {
    const Batch b = task.train_batch(step, 16, 0);
    for (int64_t r = 0; r < b.tokens.size(0); ++r) {
      const auto x = row(b, r);
      ASSERT_LE(span(x), 8) << "step " << step << " row " << r;
      lows.insert(*std::min_element(x.begin(), x.end()));
    }
  }
  EXPECT_GT(lows.size(), 50u) << "the window moves: sequences come from all over 1..1000";
  // Evaluation over all 1000 values: a sequence of 64 spans far more than 8.
  const Batch wide = task.fixed_set(64, 20, 1);
  for (int64_t r = 0; r < wide.tokens.size(0); ++r) EXPECT_GT(span(row(wide, r)), 100);
  // Evaluation in a narrow window: a long sequence is mostly ties, as at vocab_size 64.
  OrderingTask narrow(config_with({"task.vocab_size=100000", "task.eval_value_window=64"}).task);
  const Batch ties = narrow.fixed_set(512, 10, 1);
  for (int64_t r = 0; r < ties.tokens.size(0); ++r) {
    const auto x = row(ties, r);
    EXPECT_LE(span(x), 64);
    EXPECT_LE(std::set<int64_t>(x.begin(), x.end()).size(), 64u);
  }
  // Negatives are still never sorted, and the labels still balanced, inside a window.
  for (int64_t r = 0; r < ties.tokens.size(0); ++r)
    EXPECT_EQ(OrderingTask::is_sorted(row(ties, r)), ties.labels[r].item<int64_t>() == 1);
}

TEST(ValueWindow, AShareOfTheTrainingSequencesTakesTheWindow) {
  // value_window_share 0.5: about half of the sequences span at most 8 values,
  // the others spread over 1..1000; the default (1) gives the same batches as before.
  OrderingTask half(config_with({"task.vocab_size=1000", "task.value_window=8", "task.value_window_share=0.5"}).task);
  int64_t narrow = 0, total = 0;
  for (int64_t step = 0; step < 20; ++step) {
    const Batch b = half.train_batch(step, 32, 0);
    for (int64_t r = 0; r < b.tokens.size(0); ++r, ++total) narrow += span(row(b, r)) <= 8;
  }
  EXPECT_GT(narrow, total * 35 / 100);
  EXPECT_LT(narrow, total * 65 / 100);
  OrderingTask all(config_with({"task.vocab_size=1000", "task.value_window=8"}).task),
      all_by_name(config_with({"task.vocab_size=1000", "task.value_window=8", "task.value_window_share=1"}).task);
  EXPECT_TRUE(torch::equal(all.train_batch(5, 32, 0).tokens, all_by_name.train_batch(5, 32, 0).tokens));
  EXPECT_NE(error_of([] { config_with({"task.value_window_share=1.5"}); }).find("task.value_window_share"),
            std::string::npos);
  // A share that changes nothing is refused, not ignored.
  EXPECT_NE(error_of([] {
              OrderingTask t(config_with({"task.value_window_share=0.5"}).task);
            }).find("task.value_window_share=0.5 means nothing without task.value_window"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              OrderingTask t(config_with({"task.value_window=8", "task.value_window_share=0"}).task);
            }).find("task.value_window_share=0 applies task.value_window=8 to no sequence"),
            std::string::npos);
}

TEST(ValueWindow, TheDefaultDrawsAsBeforeAndBadWindowsAreNamed) {
  // Window 0 (the default) makes no extra random draw: the batches equal those of a
  // config that leaves the keys out, and the stored config says 0.
  OrderingTask plain(config_with({}).task), zero(config_with({"task.value_window=0"}).task);
  EXPECT_TRUE(torch::equal(plain.train_batch(3, 32, 0).tokens, zero.train_batch(3, 32, 0).tokens));
  EXPECT_EQ(config_with({}).task.options.get_int("value_window"), 0);
  EXPECT_NE(error_of([] {
              OrderingTask t(config_with({"task.vocab_size=64", "task.value_window=65"}).task);
            }).find("task.value_window: 65 is wider than task.vocab_size 64"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              OrderingTask t(config_with({"task.eval_value_window=1"}).task);
            }).find("task.eval_value_window: 1 value cannot make a sorted sequence"),
            std::string::npos);
  EXPECT_NE(error_of([] { config_with({"task.value_window=-3"}); }).find("task.value_window"), std::string::npos);
}

TEST(NumericEmbedding, FeaturesTellValuesApartWithoutATableRowPerValue) {
  NumericEmbedding e(100000, 32);
  const auto f = e->features(torch::tensor({1, 2, 50000, 99999, 100000}, torch::kLong));  // (5, 32)
  ASSERT_EQ(f.sizes(), (std::vector<int64_t>{5, 32}));
  // Each sin/cos pair has norm 1: every value's features have norm sqrt(16) = 4.
  EXPECT_TRUE(torch::allclose(f.norm(2, 1), torch::full({5}, 4.0), tolerance::kFloat32Model, tolerance::kFloat32Model));
  // Neighbouring values differ (the fastest pair turns a radian per unit) ...
  EXPECT_GT((f[0] - f[1]).norm().item<double>(), 0.5);
  EXPECT_GT((f[3] - f[4]).norm().item<double>(), 0.5);
  // ... and the slowest pair is monotone over 1..V (no value aliases another): its
  // angle v / (2V) stays below pi / 2, so its sine grows with v.
  const auto slow = f.select(1, 30);  // sin of the slowest pair
  for (int i = 0; i + 1 < 5; ++i) EXPECT_LT(slow[i].item<double>(), slow[i + 1].item<double>());
  // Parameters: a d x d projection and two special rows, not 100002 rows.
  int64_t n = 0;
  for (const auto& p : e->parameters()) n += p.numel();
  EXPECT_EQ(n, 32 * 32 + 32 + 2 * 32);
  // Padding and CLS take their own rows; equal values embed equally.
  auto tokens = torch::tensor({{0, 7, 7, 100001}}, torch::kLong);
  auto x = e->forward(tokens);  // (1, 4, 32)
  EXPECT_TRUE(torch::equal(x[0][1], x[0][2]));
  EXPECT_FALSE(torch::allclose(x[0][0], x[0][3]));
  EXPECT_FALSE(torch::allclose(x[0][1], x[0][3]));
}

TEST(NumericEmbedding, TheModelUsesItAndTheConfigSaysWhereItCannot) {
  auto cfg = config_with({"model.token_embedding=numeric", "model.positional.type=rope"});
  Encoder model(cfg.model, 100000);
  int64_t params = 0, table_params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  Transformer table(config_with({"model.positional.type=rope"}).model, 100000);
  for (const auto& p : table->parameters()) table_params += p.numel();
  EXPECT_LT(params * 10, table_params) << "a table of 100002 rows dominates the model; the numeric embedding does not";
  auto logits = model->forward(torch::randint(1, 100001, {3, 10}, torch::kLong));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_NE(error_of([] {
              config_with({"model.token_embedding=numeric", "model.kind=decoder", "task.type=copy"});
            }).find("model.token_embedding: \"numeric\" embeds an encoder's token values"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              config_with({"model.token_embedding=numeric", "model.attention.qkv=embedded"});
            }).find("no such table"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              config_with({"model.token_embedding=numeric", "model.d_model=33", "model.heads=1"});
            }).find("must be even"),
            std::string::npos);
  EXPECT_NE(error_of([] { config_with({"model.token_embedding=words"}); }).find("is not one of table, numeric"),
            std::string::npos);
}

TEST(NumericEmbedding, ATinyEncoderLearnsOrderingOverAHundredThousandValues) {
  // With a table, 10^5 values would each need training; through the features the
  // model learns "smaller than" from its neighbours' values.
  const auto dir = posenc::testing::fresh_dir("numeric_learns");
  TrainRequest opts;
  const auto result =
      train(posenc::testing::small_config(dir, {"train.steps=400", "model.positional.type=rope",
                                                "model.token_embedding=numeric", "task.vocab_size=100000"}),
            opts);
  EXPECT_GT(result.val_accuracy, 0.8) << "a short RoPE run with numeric tokens should be well above chance";
}

TEST(LsePooling, LiesBetweenMeanAndMaxByItsTemperature) {
  torch::manual_seed(5);
  auto lse_cfg = config_with({"model.pooling=lse", "model.positional.type=rope"});
  Encoder lse(lse_cfg.model, 64);
  lse->eval();
  auto tokens = torch::randint(1, 65, {4, 12}, torch::kLong);
  const auto with_pooling = [&](const std::string& pooling) {
    auto cfg = lse_cfg;
    cfg.model.pooling = posenc::choice_from_name<posenc::Pooling>(pooling);
    Encoder other(cfg.model, 64);
    other->eval();
    torch::NoGradGuard no_grad;
    auto theirs = other->named_parameters();
    for (const auto& p : lse->named_parameters())
      if (theirs.contains(p.key())) theirs[p.key()].copy_(p.value());
    return other->forward(tokens);
  };
  const auto set_tau = [&](double log_tau) {
    torch::NoGradGuard no_grad;
    lse->named_parameters()["pool_log_temperature"].fill_(log_tau);
    return lse->forward(tokens);
  };
  // Not rounding but the approximation: tau * log(mean exp(x / tau)) is the mean
  // plus var(x) / (2 tau), about 1e-4 for O(1) features at tau = e^8, and the max
  // minus at most tau * log(L) = e^-6 * log(L) ~ 5e-3 at tau = e^-6.
  EXPECT_TRUE(torch::allclose(set_tau(8.0), with_pooling("mean"), 1e-3, 1e-3)) << "a large tau gives the mean";
  EXPECT_TRUE(torch::allclose(set_tau(-6.0), with_pooling("max"), 1e-2, 1e-2)) << "a small tau gives the max";
  EXPECT_FALSE(torch::allclose(set_tau(0.0), with_pooling("max"), 1e-2, 1e-2)) << "tau = 1 is neither";
  // The temperature is learned: it gets a gradient.
  lse->train();
  lse->forward(tokens).sum().backward();
  const auto grad = lse->named_parameters()["pool_log_temperature"].grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_GT(grad.abs().sum().item<double>(), 0.0);
}

TEST(FalseAlarms, PerPositionVerdictsAndThePooledOneComeFromOneForward) {
  torch::manual_seed(7);
  auto cfg = config_with({"model.positional.type=rope"});
  Encoder model(cfg.model, 64);
  model->eval();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(1, 65, {3, 16}, torch::kLong);
  const auto [pooled, per_position] = model->classify_positions(tokens);
  EXPECT_TRUE(torch::allclose(pooled, model->forward(tokens), tolerance::kFloat32Value, tolerance::kFloat32Value));
  EXPECT_EQ(per_position.sizes(), (std::vector<int64_t>{3, 16, 2}));

  // Counted on an evaluation set: per sorted sequence at least the per-position
  // rate, at most L times it; none for negatives' positions.
  OrderingTask task(cfg.task);
  const TaskBatch set = task.fixed_set(32, 40, 3);
  FalseAlarms alarms;
  Transformer any_kind = model;
  score_set(any_kind, set, torch::kCPU, 1 << 20, false, &alarms);
  EXPECT_EQ(alarms.sequences, 20);  // half the set is sorted
  EXPECT_EQ(alarms.positions, 20 * 32);
  EXPECT_GE(alarms.sequence_rate(), alarms.position_rate());
  EXPECT_LE(alarms.sequence_rate(), std::min(1.0, 32 * alarms.position_rate()) + tolerance::kFloat64Closed);
  // By hand: the untrained model's per-position verdicts on the sorted rows.
  const auto [unused, verdicts] = model->classify_positions(set.tokens);
  const auto sorted_rows = set.labels.eq(1);
  const int64_t by_hand = verdicts.argmax(-1).ne(1).index({sorted_rows}).sum().item<int64_t>();
  EXPECT_EQ(alarms.alarms, by_hand);
}

TEST(ControlsGrid, EachRowSetsItsOwnControlAndTheRunsSayWhich) {
  // Without a pooling axis, a row's model.pooling stands (and names the run).
  const auto plan = posenc::plan_comparison(
      std::string(POSENC_SOURCE_DIR) + "/configs/extrapolation_controls_compare.json", "out", false, 1);
  EXPECT_EQ(plan.runs.size(), 8u * 4u * 3u);
  int checked = 0;
  for (const auto& run : plan.runs) {
    const auto& m = run.config.model;
    const auto& t = run.config.task.options;
    const std::string pooling = run.task == "lse" || run.task == "mean" ? run.task : "max";
    EXPECT_EQ(name_of(m.pooling), pooling) << run.id;
    EXPECT_NE(run.id.find("-" + name_of(m.pooling) + "-s"), std::string::npos) << run.id;
    EXPECT_EQ(name_of(m.token_embedding), run.task.rfind("numeric", 0) == 0 ? "numeric" : "table") << run.id;
    EXPECT_EQ(t.get_int("vocab_size"), run.task.rfind("numeric-wide", 0) == 0 ? 100000 : 64) << run.id;
    EXPECT_EQ(t.get_int("value_window"), run.task == "ties" || run.task == "half-ties" ? 8 : 0) << run.id;
    EXPECT_EQ(t.get_float("value_window_share"), run.task == "half-ties" ? 0.5 : 1.0) << run.id;
    EXPECT_EQ(t.get_int("eval_value_window"), run.task == "numeric-wide-ties" ? 64 : 0) << run.id;
    ++checked;
  }
  EXPECT_EQ(checked, 96);
}

TEST(ControlsGrid, TheShipped32xConfigIsTheHalfTiesRowEvaluatedTo512) {
  // configs/ordering_32x.json trains what the grid's half-ties row for
  // kerple-dir-power trained (docs/results.md holds its three seeds), with the
  // 32x grid's evaluation lengths.
  const Config shipped = posenc::testing::expect_shipped_config_trains_grid_row(
      "configs/ordering_32x.json", "configs/extrapolation_controls_compare.json",
      "half-ties-kerple-dir-power-projected-max-s0");
  EXPECT_EQ(shipped.eval.lengths.back(), 512);
}

}  // namespace POSENC_TEST_UNIT
