#include "posenc/util/permutation_test.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace posenc {
namespace {

/// C(n, k) as a double (exact below 2^53, which is all the exact test needs).
double choose(int64_t n, int64_t k) {
  double c = 1;
  for (int64_t i = 1; i <= k; ++i) c = c * static_cast<double>(n - k + i) / static_cast<double>(i);
  return std::round(c);
}

/// Counts the subsets of `values` of size `k` whose sum s makes
/// |s / n_a - (total - s) / n_b| >= threshold, by depth-first enumeration.
struct SplitCounter {
  const std::vector<double>& values;
  int64_t n_a, n_b;
  double total, threshold;
  double hits = 0;

  void count(size_t next, int64_t left, double sum) {
    if (left == 0) {
      if (std::abs(sum / n_a - (total - sum) / n_b) >= threshold) ++hits;
      return;
    }
    for (size_t i = next; i + static_cast<size_t>(left) <= values.size(); ++i) count(i + 1, left - 1, sum + values[i]);
  }
};

}  // namespace

PermutationTest permutation_test(const std::vector<double>& a, const std::vector<double>& b, double max_exact,
                                 int64_t draws) {
  PermutationTest t;
  const auto n_a = static_cast<int64_t>(a.size()), n_b = static_cast<int64_t>(b.size());
  const auto has_nan = [](const std::vector<double>& xs) {
    return std::any_of(xs.begin(), xs.end(), [](double x) { return std::isnan(x); });
  };
  if (n_a == 0 || n_b == 0 || has_nan(a) || has_nan(b)) {
    t.p = std::numeric_limits<double>::quiet_NaN();
    t.difference = t.p;
    return t;
  }
  std::vector<double> pooled(a);
  pooled.insert(pooled.end(), b.begin(), b.end());
  const double sum_a = std::accumulate(a.begin(), a.end(), 0.0), sum_b = std::accumulate(b.begin(), b.end(), 0.0);
  t.difference = sum_a / n_a - sum_b / n_b;
  t.splits = choose(n_a + n_b, n_a);
  // A split and its mirror (the groups swapped) give the same |difference| when the sizes are equal.
  t.min_p = (n_a == n_b ? 2.0 : 1.0) / t.splits;
  // Sums taken in another order differ in their last bits: a split as far
  // from equal as the observed one must not be lost to rounding.
  double scale = 1;
  for (double x : pooled) scale = std::max(scale, std::abs(x));
  const double threshold = std::abs(t.difference) - 1e-9 * scale;
  if (t.splits <= max_exact) {
    SplitCounter counter{pooled, n_a, n_b, sum_a + sum_b, threshold};
    counter.count(0, n_a, 0.0);
    t.p = counter.hits / t.splits;
    return t;
  }
  t.exact = false;
  std::mt19937_64 rng(20261129);
  std::vector<double> shuffled(pooled);
  int64_t hits = 0;
  for (int64_t d = 0; d < draws; ++d) {
    // A partial Fisher-Yates shuffle: the first n_a values are a uniform random group.
    double sum = 0;
    for (int64_t i = 0; i < n_a; ++i) {
      std::uniform_int_distribution<int64_t> pick(i, static_cast<int64_t>(shuffled.size()) - 1);
      std::swap(shuffled[static_cast<size_t>(i)], shuffled[static_cast<size_t>(pick(rng))]);
      sum += shuffled[static_cast<size_t>(i)];
    }
    if (std::abs(sum / n_a - (sum_a + sum_b - sum) / n_b) >= threshold) ++hits;
  }
  t.p = static_cast<double>(hits + 1) / static_cast<double>(draws + 1);
  return t;
}

}  // namespace posenc
