// Linear probes of a model's residual stream: how much of a token's position
// (or of a quantity its task defines: a digit's column, the carry a sum's
// digit needs) each block's input (and the last block's output) holds in a
// form a linear map can read. A causal decoder without positions can learn
// where it is from the mask alone (Haviv et al. 2022); an encoder without
// positions cannot (it is permutation-equivariant); an absolute scheme writes
// the position in before block 1. `posenc probe CHECKPOINT` measures which.
//
// Not for: what attention looks at (`posenc attention`) or what a scheme adds
// by itself (`posenc inspect`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <ATen/Tensor.h>

#include "posenc/tasks/registry.h"

namespace posenc {

/// How well a ridge regression fitted on some rows predicts the target on the others.
struct ProbeFit {
  double r2 = 0;                ///< 1 - SS_res / SS_tot on the held-out rows (0: no better than their mean)
  double mean_abs_error = 0;    ///< mean |prediction - target| on the held-out rows
  double rounded_accuracy = 0;  ///< share of held-out rows whose prediction rounds to the target
  /// Share of held-out rows whose target is the fitted rows' most common value:
  /// the rounded accuracy of a probe that reads nothing.
  double baseline_accuracy = 0;
  /// Share of held-out rows the linear classifier (LinearProbe::class_w) puts
  /// in their rounded target's class: whether the value is held linearly as
  /// one of several categories, not necessarily on a line by size.
  double class_accuracy = 0;
  /// Share of held-out rows the logistic classifier (LinearProbe::logistic_w)
  /// puts in their rounded target's class; NaN where it was not fitted (more
  /// fitted rows times classes than kLogisticBudget).
  double logistic_accuracy = 0;
};

/// The logistic classifier is fitted only where fitted rows times classes is
/// at most this (a few seconds a layer on one core); past it (a position
/// probe over hundreds of positions) only the least-squares one is.
inline constexpr int64_t kLogisticBudget = int64_t{1} << 23;
/// Its L2 penalty on the standardised weights, per unit of mean cross-entropy:
/// enough to keep the weights finite where the classes separate.
inline constexpr double kLogisticPenalty = 1e-4;
/// Its L-BFGS iterations at most: the accuracy settles long before the loss does.
inline constexpr int64_t kLogisticIterations = 100;

/// The mean prediction of the held-out rows whose target rounds to `target`.
struct TargetMean {
  double target = 0;
  double mean_prediction = 0;
  int64_t rows = 0;
};

/// A ridge regression target ≈ w·x + b fitted on some rows, to be scored on
/// others (of the same length or of another), and beside it two linear
/// classifiers of the rounded target: the same ridge regression onto each
/// class's indicator, the class of the largest score read (closed-form, and a
/// lower bound: least squares can mask a class between two others), and a
/// multinomial logistic regression (softmax over z·W + b, by L-BFGS).
struct LinearProbe {
  at::Tensor mean, scale, kept;  ///< (F) float64: the fitted rows' standardisation; kept: the features not constant
  at::Tensor w;                  ///< (F) float64: the weights on the standardised features
  double target_mean = 0;        ///< b
  double mode = 0;               ///< the fitted rows' most common rounded target (the smallest of equals)
  at::Tensor classes;            ///< (K) float64: the rounded targets the fitted rows hold, ascending
  at::Tensor class_w;            ///< (F, K) float64: each class's weights on the standardised features
  at::Tensor class_share;        ///< (K) float64: each class's share of the fitted rows (its score's intercept)
  /// (F, K) and (K) float64: the logistic classifier's weights on the
  /// standardised features and its biases; undefined past kLogisticBudget.
  at::Tensor logistic_w, logistic_b;
};

/// Fits target (N) ≈ w·x + b on features (N, F) by ridge regression, and the
/// classifiers of round(target) over the classes these rows hold. Features
/// are standardised by these rows' mean and spread (a constant feature is
/// dropped); the penalty is `ridge` times the row count on the standardised
/// weights. Computed in float64 on the CPU. A class the fitted rows lack is
/// never read: a held-out row of one counts as wrong.
LinearProbe fit_probe(const at::Tensor& features, const at::Tensor& target, double ridge);
/// How well `probe` predicts target (N) from features (N, F), N >= 2, with
/// each rounded target's mean prediction in `by_target`.
ProbeFit score_probe(const LinearProbe& probe, const at::Tensor& features, const at::Tensor& target,
                     std::vector<TargetMean>* by_target = nullptr);

/// fit_probe on rows [0, train_rows) of features (N, F) and target (N), scored
/// by score_probe on rows [train_rows, N).
ProbeFit fit_linear_probe(const at::Tensor& features, const at::Tensor& target, int64_t train_rows, double ridge);

/// Probes of every kept residual stream of one forward: `states` as
/// TransformerImpl::hidden_states() gives them, each (B, L, F), and `target`
/// (B, L) float64, NaN at the tokens where it is not defined. Each probe is
/// fitted on the first `train_examples` examples' defined tokens and scored on
/// the others'.
std::vector<ProbeFit> probe_target_values(const std::vector<at::Tensor>& states, const at::Tensor& target,
                                          int64_t train_examples, double ridge);

/// probe_target_values with token i's target its position i.
std::vector<ProbeFit> probe_positions(const std::vector<at::Tensor>& states, int64_t train_examples, double ridge);

struct ProbeRequest {
  std::vector<int64_t> lengths;  ///< in the task's unit; empty: the checkpoint's training maximum
  int64_t samples = 200;         ///< examples per length, half fitted on, half held out
  double ridge = 1e-6;
  /// "position" or "remaining" (generic_probe_targets), or one of the task's TaskInfo::probe_targets
  std::string target = kPositionTarget;
  /// Empty: each length's probes are fitted on its own first half. Else they
  /// are fitted once, on these lengths' first halves together, and scored on
  /// each length's second half: whether what a layer holds at the lengths it
  /// was fitted at reads the same way at another.
  std::vector<int64_t> fit_lengths;
};

/// Probes of a trained checkpoint for `target` on its task's fixed evaluation
/// examples (eval.seed) at each length: {"checkpoint", "scheme", "task",
/// "kind", "target", "target_description", "trained_lengths", "lengths":
/// [{"length", "positions", "features", "fitted_examples", "fitted_tokens",
/// "held_out_examples", "held_out_tokens", "layers":
/// [{"layer", "reads", "r2", "mean_abs_error", "rounded_accuracy",
/// "class_accuracy", "logistic_accuracy" (null where not fitted),
/// "baseline_accuracy", "by_target": [{"target",
/// "mean_prediction", "tokens"}]}]}], and "fit_lengths" (empty when each
/// length fits its own).
/// An encoder_decoder's entry is its encoder's, over
/// the source, with "decoder": {"positions", "features", "fitted_tokens",
/// "held_out_tokens", "layers"} over the target (each side counts its
/// positions from 0). Padding (token 0) is neither fitted nor scored.
/// ConfigError for a target the task does not define, naming those it does.
nlohmann::json probe_checkpoint(const std::string& checkpoint, const ProbeRequest& request);

}  // namespace posenc
