// The summary of a comparison: one row per variant (scheme x qkv x pooling),
// accuracies as mean and standard deviation over seeds, and an extrapolation
// column; rendered as JSON, CSV, Markdown and a terminal table.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/experiments/compare_plan.h"
#include "posenc/util/permutation_test.h"

namespace posenc {

/// Mean and sample standard deviation (n - 1 denominator; 0 when n == 1).
struct Stat {
  double mean = 0, std = 0;
  int n = 0;
};
Stat stat_of(const std::vector<double>& xs);

struct LengthSummary {
  int64_t length = 0;
  bool beyond_training = false;
  Stat accuracy;  ///< over seeds
  /// The table's score of each run, in the variant's seeds order: perplexity
  /// where the task measures it, else the accuracy or exact match above.
  std::vector<double> by_seed;
  int64_t correct = 0, total = 0;       ///< pooled over seeds
  double ci_lo = 0, ci_hi = 0;          ///< 95% Wilson interval of the pooled predictions
  std::map<std::string, Stat> by_kind;  ///< "sorted" and each negative kind, over seeds
  Stat perplexity;                      ///< over seeds (metric "perplexity" only)
  Stat bleu;                            ///< corpus BLEU of this length, over seeds (BLEU tasks only)
  /// On sorted sequences, over seeds (encoders pooling every position): the share of
  /// positions whose own output is called unsorted, and of sequences with one such position.
  Stat alarms_per_position, alarmed_sequences;
};

/// Marks of VariantSummary::extrapolation.
constexpr int64_t kNotLearned = -1;  ///< in-distribution accuracy below kLearnedAccuracy
constexpr double kLearnedAccuracy = 0.6;
/// Fraction of the in-distribution margin above chance a length must keep
/// (chance: 0.5 for the ordering classifier, 0 for exact match and next-token accuracy).
constexpr double kRetainedMargin = 0.9;
/// Language modelling: a context "extrapolates" while its perplexity stays within
/// this factor of the perplexity at the longest training context.
constexpr double kPerplexityTolerance = 1.1;

struct VariantSummary {
  std::string variant, task, scheme, qkv, pooling;
  /// The task's metric (results.json "metric"): "accuracy", "exact_match" or
  /// "perplexity". Stat accuracy holds exact match for exact_match and
  /// next-token accuracy for perplexity.
  std::string metric = "accuracy";
  std::vector<std::string> runs;  ///< run ids (finished ones)
  std::vector<int64_t> seeds;
  int64_t steps = 0;          ///< optimizer steps its runs trained (results.json "steps")
  int64_t averaged_from = 0;  ///< train.average_from when its runs scored averaged weights, else 0
  int64_t parameters = 0;
  Stat train_seconds, val_accuracy, final_loss;
  std::vector<LengthSummary> lengths;
  /// Mean accuracy over the evaluation lengths beyond training (-1 when there are none).
  double beyond_mean = -1;
  /// The longest evaluation length L such that every evaluated length <= L keeps
  /// accuracy >= 0.5 + kRetainedMargin * (val - 0.5); 0 if even the shortest
  /// does not; kNotLearned if val < kLearnedAccuracy.
  int64_t extrapolation = 0;
  /// The same rule on each run alone (its own in-distribution score and
  /// curve), in `seeds` order: whether a row's mean extrapolates because every
  /// seed does or because some do and others fail.
  std::vector<int64_t> extrapolation_by_seed;
  /// Corpus BLEU over the evaluation lengths within and beyond training
  /// (results.json "bleu"), over seeds; n == 0 for tasks without BLEU.
  Stat bleu_within, bleu_beyond;
  bool has_bleu() const { return bleu_within.n > 0 || bleu_beyond.n > 0; }
};

/// The runs whose results.json recorded one numeric environment (posenc's
/// commit, the device, LibTorch, the BLAS and its kernels: numeric_environment()). Training
/// amplifies last-bit differences between kernels, so a grid whose runs come
/// from two machines may not score as either machine alone would.
struct EnvironmentGroup {
  nlohmann::json environment;     ///< null: runs written before posenc recorded it
  std::vector<std::string> runs;  ///< run ids, in plan order
};

/// "posenc 566c6bf2a1b3, cpu, LibTorch 1.13.0, BLAS /usr/lib/.../libblas.so.3
/// (Haswell kernels)", with the kernel overrides a user set; "not recorded" for null.
std::string describe_environment(const nlohmann::json& environment);

struct ComparisonSummary {
  std::string source, description;
  bool full = false;
  int64_t steps = 0, batch_size = 0, train_min_length = 0, train_max_length = 0;
  int64_t samples_per_length = 0, eval_seed = 0, val_samples = 0;
  std::map<std::string, double> negatives;
  std::vector<int64_t> eval_lengths;
  std::vector<std::string> tasks;                             ///< the grid's tasks axis (empty: one task)
  std::vector<VariantSummary> variants;                       ///< sorted: see summarize()
  std::vector<std::pair<std::string, std::string>> skipped;   ///< variant, reason (incompatible)
  std::vector<std::string> unfinished;                        ///< run ids without results.json
  std::vector<std::pair<std::string, std::string>> diverged;  ///< run id, diverged.json's message (NaN/inf)
  std::vector<EnvironmentGroup> environments;                 ///< of the finished runs, as first seen
};

/// Reads results.json of every finished run of the plan and aggregates per
/// variant. Rows are grouped by task (grid order) and sorted within a task by:
/// learned before not learned, then mean accuracy beyond training, then
/// in-distribution accuracy (both descending).
ComparisonSummary summarize(const ComparePlan& plan);

/// Aggregates the results.json documents of one variant's runs (seed order).
VariantSummary summarize_variant(const std::vector<nlohmann::json>& results, const std::vector<std::string>& ids);

/// The extrapolation length rule of VariantSummary::extrapolation.
int64_t extrapolation_length(double val_accuracy, const std::vector<std::pair<int64_t, double>>& length_accuracy,
                             double chance = 0.5);

/// Rows of at least this many seeds are tested over seeds against the top
/// such row of their task (the first in `variants`' order).
constexpr size_t kSeedsForTest = 3;

/// One row's difference from its task's top row at one length, over seeds.
struct SeedTest {
  size_t variant = 0, top = 0;  ///< indices into ComparisonSummary::variants
  int64_t length = 0;
  PermutationTest test;
};

/// Every row of kSeedsForTest seeds or more against its task's top such row, at
/// each length both were evaluated at (in variant, then length order).
std::vector<SeedTest> seed_tests(const ComparisonSummary& s);

nlohmann::json summary_to_json(const ComparisonSummary& s);
std::string summary_to_csv(const ComparisonSummary& s);
std::string summary_to_markdown(const ComparisonSummary& s);
/// Aligned plain-text table for the terminal.
std::string summary_to_text(const ComparisonSummary& s);

}  // namespace posenc
