// The ordering task generator: balance, negatives never sorted, multiset preserved, determinism.
#include <gtest/gtest.h>

#include <algorithm>

#include "posenc/tasks/ordering.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using posenc::Batch;
using posenc::OrderingTask;

namespace {

std::vector<int64_t> row(const Batch& b, int64_t r) {
  auto t = b.tokens[r];
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

/// The ordering task's config as a config file would give it, with `sets` applied.
posenc::TaskConfig ordering_config(std::initializer_list<std::string> sets = {}) {
  posenc::json j = posenc::json::object();
  for (const auto& s : sets) posenc::apply_override(j, s);
  return posenc::config_from_json(j).task;
}

}  // namespace

TEST(Ordering, NegativesAreUnsortedPermutationsOfAPositive) {
  const posenc::TaskConfig cfg =
      ordering_config({"task.vocab_size=5"});  // many repeated tokens: the hard case for "never sorted"
  OrderingTask task(cfg);
  std::mt19937_64 rng(1);
  for (int kind = 0; kind < 4; ++kind)
    for (int i = 0; i < 500; ++i) {
      const int64_t len = 2 + i % 30;
      auto pos = task.positive(len, rng);
      ASSERT_TRUE(OrderingTask::is_sorted(pos));
      auto neg = task.negative(pos, kind, rng);
      ASSERT_FALSE(OrderingTask::is_sorted(neg)) << "kind " << OrderingTask::negative_kinds()[kind];
      auto sorted_neg = neg;
      std::sort(sorted_neg.begin(), sorted_neg.end());
      ASSERT_EQ(sorted_neg, pos) << "multiset changed";
    }
}

TEST(Ordering, AdjacentSwapChangesExactlyOneNeighbouringPair) {
  const posenc::TaskConfig cfg = ordering_config();
  OrderingTask task(cfg);
  std::mt19937_64 rng(2);
  const int adjacent = 1;
  ASSERT_EQ(OrderingTask::negative_kinds()[adjacent], "adjacent_swap");
  for (int i = 0; i < 200; ++i) {
    auto pos = task.positive(12, rng);
    auto neg = task.negative(pos, adjacent, rng);
    std::vector<int64_t> diff;
    for (size_t j = 0; j < pos.size(); ++j)
      if (pos[j] != neg[j]) diff.push_back(static_cast<int64_t>(j));
    ASSERT_EQ(diff.size(), 2u);
    ASSERT_EQ(diff[1], diff[0] + 1);
  }
}

TEST(Ordering, FixedSetIsBalancedSplitByWeightAndDeterministic) {
  const posenc::TaskConfig cfg =
      ordering_config({"task.negatives={\"shuffle\": 2, \"adjacent_swap\": 1, \"random_swap\": 1, \"reverse\": 0}"});
  OrderingTask task(cfg);
  const Batch a = task.fixed_set(32, 400, 7);
  const Batch b = task.fixed_set(32, 400, 7);
  const Batch c = task.fixed_set(32, 400, 8);
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens));
  EXPECT_FALSE(torch::equal(a.tokens, c.tokens));
  EXPECT_EQ(a.labels.sum().item<int64_t>(), 200);
  std::map<int, int> count;
  for (int k : a.kinds) count[k]++;
  EXPECT_EQ(count[posenc::kSortedKind], 200);
  EXPECT_EQ(count[0], 100);  // shuffle: weight 2 of 4
  EXPECT_EQ(count[1], 50);
  EXPECT_EQ(count[2], 50);
  EXPECT_EQ(count.count(3), 0u);  // reverse: weight 0
  for (int64_t r = 0; r < 400; ++r) {
    const bool sorted = OrderingTask::is_sorted(row(a, r));
    EXPECT_EQ(sorted, a.labels[r].item<int64_t>() == 1);
    EXPECT_EQ(sorted, a.kinds[r] == posenc::kSortedKind);
  }
}

TEST(Ordering, TrainBatchesAreBalancedInRangeAndPureFunctionsOfStep) {
  const posenc::TaskConfig cfg = ordering_config();
  OrderingTask task(cfg);
  std::set<int64_t> lengths;
  for (int64_t step = 0; step < 200; ++step) {
    const Batch b = task.train_batch(step, 64, 3);
    EXPECT_EQ(b.labels.sum().item<int64_t>(), 32);
    lengths.insert(b.tokens.size(1));
    EXPECT_GE(b.tokens.min().item<int64_t>(), 1);
    EXPECT_LE(b.tokens.max().item<int64_t>(), posenc::task_vocab_size(cfg));
  }
  EXPECT_EQ(*lengths.begin(), cfg.min_length);
  EXPECT_EQ(*lengths.rbegin(), cfg.max_length);
  EXPECT_TRUE(torch::equal(task.train_batch(17, 64, 3).tokens, task.train_batch(17, 64, 3).tokens));
  EXPECT_FALSE(torch::equal(task.train_batch(17, 64, 3).tokens, task.train_batch(17, 64, 4).tokens));
}

}  // namespace POSENC_TEST_UNIT
