// A two-sided permutation test of two groups' means, for "is this row better
// than that one over seeds?": it assumes nothing of the scores' distribution,
// which over a handful of seeds is unknowable, only that the seeds were
// drawn alike for both groups.
#pragma once

#include <cstdint>
#include <vector>

namespace posenc {

struct PermutationTest {
  double difference = 0;  ///< mean(a) - mean(b)
  /// The share of the ways to split the pooled scores into groups of a's and
  /// b's sizes whose |difference of means| is at least the observed one; NaN
  /// when a score is NaN or a group is empty.
  double p = 1;
  bool exact = true;  ///< every split counted; else estimated from random splits
  double splits = 0;  ///< the number of distinct splits, C(n + m, n)
  double min_p = 1;   ///< the smallest p an exact test can give at these sizes
};

/// The default bounds of permutation_test: count every split up to this many,
/// and past it estimate p from this many random splits.
constexpr double kExactSplits = 5e6;
constexpr int64_t kRandomSplits = 200000;

/// Exact (every split) while there are at most `max_exact` splits; otherwise
/// `draws` random splits from a fixed seed, p = (hits + 1) / (draws + 1).
PermutationTest permutation_test(const std::vector<double>& a, const std::vector<double>& b,
                                 double max_exact = kExactSplits, int64_t draws = kRandomSplits);

}  // namespace posenc
