// The ordering task (the exercise of the "LLM to VLA" course's positional-encoding lesson, docs/sources.md): is this sequence non-decreasing?
//
// Positives are sorted draws of tokens 1..V. Every negative is a permutation
// of a positive's own tokens, so the token multiset carries no signal and a
// model without positions is at chance by construction. Negative kinds mix by
// weight: shuffle, adjacent_swap (one neighbouring unequal pair swapped),
// random_swap, reverse. Labels are balanced at every length; every batch and
// evaluation set is a pure function of its seed. task.value_window and
// eval_value_window draw each sequence from a random window of values, which
// controls how many equal tokens (ties) a sequence of a given length holds.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "posenc/tasks/task.h"

namespace posenc {

/// Kind index of a positive example in Batch::kinds.
constexpr int kSortedKind = -1;

/// Ordering examples: tokens (B, L) in 1..V, labels (B) with 1 = sorted, kinds
/// kSortedKind or an index into OrderingTask::negative_kinds().
using Batch = TaskBatch;

class OrderingTask : public Task {
 public:
  explicit OrderingTask(const TaskConfig& cfg);
  static TaskInfo registry_info();
  const TaskInfo& info() const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<std::string> kind_names() const override { return negative_kinds(); }

  /// Names of the negative kinds, in kind-index order.
  static const std::vector<std::string>& negative_kinds();
  static bool is_sorted(const std::vector<int64_t>& seq);

  /// A training batch for `step`: one length drawn from [min_length, max_length],
  /// half positives, negatives of random kinds by weight. Same (seed, step) -> same batch.
  Batch train_batch(int64_t step, int64_t batch_size, int64_t seed) const override;

  /// A fixed set of n examples of one length: n/2 positives, negatives split
  /// across kinds in proportion to the weights (largest remainder).
  Batch fixed_set(int64_t length, int64_t n, int64_t seed) const override;

  /// Draws one sorted sequence with at least two distinct tokens, from a random
  /// window of `window` consecutive values (0: from all of 1..V).
  std::vector<int64_t> positive(int64_t length, std::mt19937_64& rng, int64_t window = 0) const;
  /// A permutation of `sorted` of the given kind that is never sorted.
  std::vector<int64_t> negative(const std::vector<int64_t>& sorted, int kind, std::mt19937_64& rng) const;

  const TaskConfig& config() const { return cfg_; }

 protected:
  /// descent, its one probe target: 1 at token i > 0 where token i < token i - 1, else 0 (NaN at token 0).
  torch::Tensor declared_probe_target(const std::string& name, int64_t length, int64_t n, int64_t seed) const override;

 private:
  Batch assemble(std::vector<std::vector<int64_t>> seqs, std::vector<int> kinds, std::mt19937_64& rng) const;
  TaskConfig cfg_;
  int64_t vocab_size_;
  int64_t train_window_, eval_window_;  // task.value_window, task.eval_value_window (0: all values)
  double train_window_share_;           // task.value_window_share
  std::vector<double> weights_;         // per kind index
};

}  // namespace posenc
