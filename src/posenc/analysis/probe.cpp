#include "posenc/analysis/probe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "posenc/analysis/examples.h"
#include "posenc/config.h"
#include "posenc/errors.h"
#include "posenc/model/decoder.h"
#include "posenc/model/encoder.h"
#include "posenc/model/encoder_decoder.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/fits.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/text.h"

namespace posenc {

namespace {

/// Features (N, F) standardised as `p`'s fitted rows were, the dropped ones 0.
at::Tensor standardised(const LinearProbe& p, const at::Tensor& x) { return (x - p.mean) / p.scale * p.kept; }

/// The multinomial logistic regression of class_of (N) on standardised
/// features z (N, F) over the K classes of class_share (K): W (F, K) and b
/// (K) minimising the mean cross-entropy plus kLogisticPenalty / 2 · |W|², by
/// L-BFGS with a strong Wolfe line search from W = 0 and b = log(each class's
/// share), the prior.
/// Deterministic for a given thread count.
std::pair<at::Tensor, at::Tensor> fit_logistic(const at::Tensor& z, const at::Tensor& class_of,
                                               const at::Tensor& class_share) {
  c10::InferenceMode not_inference(false);  // z may come from streams kept in inference mode
  torch::AutoGradMode grad(true);
  const auto x = z.clone();  // (N, F), an ordinary tensor autograd may save
  auto w = torch::zeros({z.size(1), class_share.size(0)}, x.options()).requires_grad_(true);  // (F, K)
  auto b = class_share.log().clone().requires_grad_(true);                                    // (K)
  torch::optim::LBFGS optimizer({w, b}, torch::optim::LBFGSOptions(1.0)
                                            .max_iter(kLogisticIterations)
                                            .tolerance_grad(1e-10)
                                            .tolerance_change(1e-12)
                                            .history_size(20)
                                            .line_search_fn("strong_wolfe"));
  optimizer.step([&] {
    optimizer.zero_grad();
    auto loss =
        torch::nn::functional::cross_entropy(x.matmul(w) + b, class_of) + 0.5 * kLogisticPenalty * w.pow(2).sum();
    loss.backward();
    return loss;
  });
  return {w.detach(), b.detach()};
}

/// The share of rows of z (N, F) whose largest score z·W + B (the class_w or
/// logistic_w weights) picks the class of their rounded target (N), in chunks
/// of rows whose (rows, K) scores stay near 32 MB.
double classified_share(const at::Tensor& z, const at::Tensor& rounded, const at::Tensor& classes,
                        const at::Tensor& weights, const at::Tensor& biases) {
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(1, classes.size(0)));
  int64_t classed = 0;
  for (int64_t start = 0; start < z.size(0); start += chunk) {
    const int64_t rows = std::min(chunk, z.size(0) - start);
    const auto scores = z.narrow(0, start, rows).matmul(weights) + biases;  // (rows, K)
    const auto read = classes.index_select(0, scores.argmax(1));            // (rows)
    classed += read.eq(rounded.narrow(0, start, rows)).sum().item<int64_t>();
  }
  return static_cast<double>(classed) / static_cast<double>(z.size(0));
}

}  // namespace

LinearProbe fit_probe(const at::Tensor& features, const at::Tensor& target, double ridge) {
  TORCH_CHECK(features.dim() == 2 && target.dim() == 1 && features.size(0) == target.size(0),
              "fit_probe: expected features (N, F) and target (N), got ", features.sizes(), " and ", target.sizes());
  const int64_t n = features.size(0), f = features.size(1);
  TORCH_CHECK(n >= 2, "fit_probe: ", n, " fitted rows: at least 2");
  const auto x = features.to(torch::kCPU, torch::kFloat64);  // (N, F)
  const auto y = target.to(torch::kCPU, torch::kFloat64);    // (N)

  // Standardise by these rows; a feature constant here carries nothing to fit.
  LinearProbe p;
  p.mean = x.mean(0);                                      // (F)
  const auto spread = (x - p.mean).pow(2).mean(0).sqrt();  // (F), the population spread
  p.kept = spread.gt(1e-12 * (1.0 + p.mean.abs().max().item<double>())).to(torch::kFloat64);
  p.scale = torch::where(p.kept.gt(0), spread, torch::ones_like(spread));
  const auto z = standardised(p, x);  // (N, F)
  p.target_mean = y.mean().item<double>();

  // The classes: each fitted row's rounded target, as an index into the distinct values.
  const auto rounded = y.round().contiguous();
  std::map<double, int64_t> index;  // class value -> its index, ascending
  for (int64_t i = 0; i < n; ++i) index.emplace(rounded.data_ptr<double>()[i], 0);
  std::vector<double> values;
  for (auto& [value, i] : index) {
    i = static_cast<int64_t>(values.size());
    values.push_back(value);
  }
  const int64_t k = static_cast<int64_t>(values.size());
  auto class_of = torch::empty({n}, torch::kLong);  // (N)
  for (int64_t i = 0; i < n; ++i) class_of.data_ptr<int64_t>()[i] = index.at(rounded.data_ptr<double>()[i]);
  p.classes = torch::tensor(values, x.options());                                                           // (K)
  const auto rows_per_class = torch::zeros({k}, x.options()).index_add_(0, class_of, torch::ones_like(y));  // (K)
  p.class_share = rows_per_class / static_cast<double>(n);

  // (ZᵀZ + λ N I) W = Zᵀ [y - ȳ, Y]: the normal equations of ridge regression,
  // solved at once for the value and for each class's indicator Y (N, K). Z's
  // columns have mean 0 here, so Zᵀ Y needs no centring of Y; it is the sum
  // of each class's rows, gathered without forming Y.
  const auto gram = z.t().matmul(z) + ridge * static_cast<double>(n) * torch::eye(f, x.options());
  const auto class_sums = torch::zeros({k, f}, x.options()).index_add_(0, class_of, z);            // (K, F)
  const auto rhs = torch::cat({z.t().matmul(y - p.target_mean).unsqueeze(1), class_sums.t()}, 1);  // (F, 1 + K)
  const auto solved = torch::linalg_solve(gram, rhs);                                              // (F, 1 + K)
  p.w = solved.select(1, 0).contiguous();                                                          // (F)
  p.class_w = solved.narrow(1, 1, k);                                                              // (F, K)

  // The most common fitted value (the smallest of equals), as a probe that reads nothing would answer.
  p.mode = values[static_cast<size_t>(rows_per_class.argmax().item<int64_t>())];  // argmax: the first of equals

  if (n * k <= kLogisticBudget) std::tie(p.logistic_w, p.logistic_b) = fit_logistic(z, class_of, p.class_share);
  return p;
}

ProbeFit score_probe(const LinearProbe& p, const at::Tensor& features, const at::Tensor& target,
                     std::vector<TargetMean>* by_target) {
  TORCH_CHECK(
      features.dim() == 2 && target.dim() == 1 && features.size(0) == target.size(0) && features.size(1) == p.w.size(0),
      "score_probe: expected features (N, ", p.w.size(0), ") and target (N), got ", features.sizes(), " and ",
      target.sizes());
  TORCH_CHECK(features.size(0) >= 2, "score_probe: ", features.size(0), " scored rows: at least 2");
  const auto z = standardised(p, features.to(torch::kCPU, torch::kFloat64));  // (N, F)
  const auto y = target.to(torch::kCPU, torch::kFloat64);                     // (N)
  const auto rounded = y.round().contiguous();                                // (N)
  const auto predicted = z.matmul(p.w) + p.target_mean;                       // (N)
  ProbeFit fit;
  const double total = (y - y.mean()).pow(2).sum().item<double>();
  const double residual = (predicted - y).pow(2).sum().item<double>();
  fit.r2 = total > 0 ? 1.0 - residual / total : 0.0;
  fit.mean_abs_error = (predicted - y).abs().mean().item<double>();
  fit.rounded_accuracy = predicted.round().eq(y).to(torch::kFloat64).mean().item<double>();
  fit.baseline_accuracy = y.eq(p.mode).to(torch::kFloat64).mean().item<double>();
  fit.class_accuracy = classified_share(z, rounded, p.classes, p.class_w, p.class_share);
  fit.logistic_accuracy = p.logistic_w.defined() ? classified_share(z, rounded, p.classes, p.logistic_w, p.logistic_b)
                                                 : std::numeric_limits<double>::quiet_NaN();
  if (by_target) {
    std::map<double, std::pair<double, int64_t>> sums;  // rounded target -> (sum of predictions, rows)
    const auto pred = predicted.contiguous();
    for (int64_t i = 0; i < y.size(0); ++i) {
      auto& [sum, rows] = sums[rounded.data_ptr<double>()[i]];
      sum += pred.data_ptr<double>()[i];
      ++rows;
    }
    by_target->clear();
    for (const auto& [value, s] : sums)
      by_target->push_back({value, s.first / static_cast<double>(s.second), s.second});
  }
  return fit;
}

ProbeFit fit_linear_probe(const at::Tensor& features, const at::Tensor& target, int64_t train_rows, double ridge) {
  TORCH_CHECK(features.dim() == 2 && target.dim() == 1 && features.size(0) == target.size(0),
              "fit_linear_probe: expected features (N, F) and target (N), got ", features.sizes(), " and ",
              target.sizes());
  const int64_t n = features.size(0);
  TORCH_CHECK(train_rows >= 2 && n - train_rows >= 2, "fit_linear_probe: ", train_rows, " fitted rows of ", n,
              ": at least 2 on each side");
  const auto probe = fit_probe(features.narrow(0, 0, train_rows), target.narrow(0, 0, train_rows), ridge);
  return score_probe(probe, features.narrow(0, train_rows, n - train_rows),
                     target.narrow(0, train_rows, n - train_rows));
}

namespace {

/// Examples [begin, begin + count) of a stream (B, L, F) at the tokens where
/// `target` (B, L) is defined: their features (n, F) and targets (n).
std::pair<at::Tensor, at::Tensor> defined_rows(const at::Tensor& state, const at::Tensor& target, int64_t begin,
                                               int64_t count) {
  TORCH_CHECK(state.dim() == 3, "probe: expected states (B, L, F), got ", state.sizes());
  TORCH_CHECK(target.dim() == 2 && target.size(0) == state.size(0) && target.size(1) == state.size(1),
              "probe: expected a target (B, L) = (", state.size(0), ", ", state.size(1), "), got ", target.sizes());
  const auto values = target.to(torch::kCPU, torch::kFloat64).narrow(0, begin, count).reshape({-1});  // (count·L)
  const auto features = state.narrow(0, begin, count).reshape({-1, state.size(2)});                   // (count·L, F)
  const auto defined = values.isfinite();
  return {features.index({defined}), values.index({defined})};
}

}  // namespace

std::vector<ProbeFit> probe_target_values(const std::vector<at::Tensor>& states, const at::Tensor& target,
                                          int64_t train_examples, double ridge) {
  std::vector<ProbeFit> fits;
  for (const auto& s : states) {
    const int64_t b = s.dim() == 3 ? s.size(0) : 0;
    TORCH_CHECK(train_examples >= 1 && train_examples < b, "probe_target_values: ", train_examples,
                " fitted examples of ", b);
    const auto [x_fit, y_fit] = defined_rows(s, target, 0, train_examples);
    const auto [x_held, y_held] = defined_rows(s, target, train_examples, b - train_examples);
    TORCH_CHECK(x_fit.size(0) >= 2 && x_held.size(0) >= 2, "probe_target_values: ", x_fit.size(0), " fitted and ",
                x_held.size(0), " held-out tokens: at least 2 on each side");
    fits.push_back(score_probe(fit_probe(x_fit, y_fit, ridge), x_held, y_held));
  }
  return fits;
}

std::vector<ProbeFit> probe_positions(const std::vector<at::Tensor>& states, int64_t train_examples, double ridge) {
  TORCH_CHECK(!states.empty() && states.front().dim() == 3, "probe_positions: expected states (B, L, F)");
  const int64_t b = states.front().size(0), l = states.front().size(1);
  const auto position = torch::arange(l, torch::kFloat64).repeat({b, 1});  // (B, L): 0..L-1 per example
  return probe_target_values(states, position, train_examples, ridge);
}

namespace {

/// One stack of blocks the probe reads, with what it read.
struct KeptStack {
  /// "" for an encoder's or a decoder's stack; "encoder" or "decoder" in an encoder_decoder.
  std::string name;
  int64_t layers = 0;              ///< blocks in this stack
  int64_t first = 0;               ///< the row's column of its first token (an encoder_decoder's target: SEP's)
  int64_t side_end = 0;            ///< one past the row's last column of its side (a decoder's: the predicted last)
  at::Tensor tokens;               ///< (B, L) what it read, 0 for padding
  std::vector<at::Tensor> states;  ///< layers + 1 streams, each (B, L', F) on the CPU (L' = L + 1 with CLS)
};

/// What kept residual stream `layer` (0-based) of `stack` is, in words.
std::string reads(int64_t layer, const KeptStack& stack) {
  const std::string block = stack.name.empty() ? "block" : stack.name + " block";
  const std::string side = stack.name == "encoder"   ? "source tokens"
                           : stack.name == "decoder" ? "target tokens"
                                                     : "tokens";
  if (layer == 0) return fmt::format("the input of {} 1 ({} and any positions added to them)", block, side);
  if (layer == stack.layers)
    return fmt::format("the output of {} {} (before its final LayerNorm)", block, stack.layers);
  return fmt::format("the input of {} {}", block, layer + 1);
}

/// The stacks the model runs over the rows of `set` (B, T), each with its
/// residual streams, forwarded in chunks the evaluation's memory bound allows,
/// each stack over what it reads of the rows (analysis/examples.h model_inputs).
std::vector<KeptStack> kept_states(Transformer& model, const TaskBatch& set, int64_t max_batch_tokens) {
  const ModelConfig& m = model->config();
  const ModelInputs inputs = model_inputs(model, set);
  std::vector<KeptStack> stacks;
  if (m.kind == ModelKind::EncoderDecoder) {
    stacks.push_back({"encoder", m.layers, 0, inputs.target_first, inputs.tokens, {}});
    stacks.push_back({"decoder", m.decoder_layers, inputs.target_first, set.tokens.size(1), inputs.target, {}});
  } else {
    stacks.push_back({"", m.layers, 0, set.tokens.size(1), inputs.tokens, {}});
  }
  const int64_t chunk = evaluation_batch_size(model, set.tokens.size(1), max_batch_tokens);
  std::vector<std::vector<std::vector<at::Tensor>>> parts(stacks.size());  // [stack][layer][chunk]
  model->eval();
  c10::InferenceMode guard;
  model->keep_hidden_states(true);  // each forward keeps its own chunk's streams
  for (int64_t start = 0; start < set.tokens.size(0); start += chunk) {
    throw_if_interrupted();
    forward_inputs(model, rows_of(inputs, start, std::min(chunk, set.tokens.size(0) - start)), "probe");
    for (size_t s = 0; s < stacks.size(); ++s) {
      const auto& states = s == 0 ? model->hidden_states() : model->decoder_hidden_states();
      parts[s].resize(states.size());
      for (size_t i = 0; i < states.size(); ++i) parts[s][i].push_back(states[i].to(torch::kCPU));
    }
  }
  model->keep_hidden_states(false);
  for (size_t s = 0; s < stacks.size(); ++s)
    for (const auto& p : parts[s]) stacks[s].states.push_back(torch::cat(p, /*dim=*/0));
  return stacks;
}

/// For each token `stack` read (B, L), the tokens of its side of `rows` (B, T)
/// after it, up to the side's last that is neither padding nor `end_token`
/// (0: none ends the answer); NaN past that last one (an end token read).
at::Tensor remaining_tokens(const KeptStack& stack, const at::Tensor& rows, int64_t end_token) {
  const auto side = rows.narrow(1, stack.first, stack.side_end - stack.first);  // (B, S)
  auto counted = side.ne(0);
  if (end_token > 0) counted = counted.logical_and(side.ne(end_token));
  const auto column = torch::arange(side.size(1), torch::kLong).expand_as(side);                            // (B, S)
  const auto last = torch::where(counted, column, torch::full_like(column, -1)).amax(1, /*keepdim=*/true);  // (B, 1)
  auto left = (last - column.narrow(1, 0, stack.tokens.size(1))).to(torch::kFloat64);                       // (B, L)
  return left.masked_fill_(left.lt(0), std::nan(""));
}

/// The target of each token `stack` read: (B, L') float64, NaN where it is
/// undefined and at padding. `row_values` (B, T) is the task's target over the
/// whole rows (undefined for the targets every task has: position, remaining).
at::Tensor stack_target(const KeptStack& stack, const std::string& target, const at::Tensor& row_values,
                        const at::Tensor& rows, int64_t end_token) {
  const int64_t b = stack.tokens.size(0), l = stack.tokens.size(1), read = stack.states.front().size(1);
  at::Tensor values;  // (B, L)
  if (row_values.defined())
    values = row_values.narrow(1, stack.first, l).clone();
  else if (target == kRemainingTarget)
    values = remaining_tokens(stack, rows, end_token);
  else
    values = torch::arange(read - l, read, torch::kFloat64).repeat({b, 1});
  values.masked_fill_(stack.tokens.eq(0), std::nan(""));  // padding is no token
  if (read == l) return values;
  // CLS before the tokens: position 0, and every token after it; no task target is defined there.
  TORCH_CHECK(read == l + 1, "probe: ", read, " positions read where ", l, " tokens were given");
  const auto cls = row_values.defined()         ? torch::full({b, 1}, std::nan(""), torch::kFloat64)
                   : target == kRemainingTarget ? values.narrow(1, 0, 1) + 1
                                                : torch::zeros({b, 1}, torch::kFloat64);
  return torch::cat({cls, values}, 1);  // (B, L + 1)
}

/// Tokens of examples [begin, begin + count) where `target` (B, L') is defined.
int64_t defined_tokens(const at::Tensor& target, int64_t begin, int64_t count) {
  return target.narrow(0, begin, count).isfinite().sum().item<int64_t>();
}

/// Refuses a target defined at fewer than 2 fitted or 2 held-out tokens of `stack` at `length`.
void require_defined(const KeptStack& stack, const at::Tensor& target, const ProbeRequest& r, int64_t length) {
  const int64_t b = target.size(0);
  const int64_t fitted = defined_tokens(target, 0, b / 2), held_out = defined_tokens(target, b / 2, b - b / 2);
  if (fitted < 2 || held_out < 2)
    throw ConfigError(fmt::format(
        "--target {}: defined at {} fitted and {} held-out tokens {}of length {}; the probe needs 2 of each: "
        "choose more --samples or a longer length",
        r.target, fitted, held_out, stack.name.empty() ? "" : "in the " + stack.name + " ", length));
}

/// A stack's probes, one per kept stream, and what they were fitted on.
struct StackProbes {
  std::vector<LinearProbe> layers;
  int64_t examples = 0;  ///< examples fitted on, over every length
  int64_t tokens = 0;    ///< their tokens where the target is defined
};

/// One probe per kept stream of a stack, fitted on the first half of the
/// examples' defined tokens of every (stack, target) given: one length's, or
/// several lengths' together.
StackProbes fit_stack(const std::vector<std::pair<const KeptStack*, at::Tensor>>& lengths, double ridge) {
  StackProbes probes;
  for (const auto& [stack, target] : lengths) probes.examples += target.size(0) / 2;
  for (size_t layer = 0; layer < lengths.front().first->states.size(); ++layer) {
    std::vector<at::Tensor> xs, ys;
    for (const auto& [stack, target] : lengths) {
      const auto [x, y] = defined_rows(stack->states[layer], target, 0, target.size(0) / 2);
      xs.push_back(x);
      ys.push_back(y);
    }
    const auto x = torch::cat(xs, 0), y = torch::cat(ys, 0);
    probes.tokens = y.size(0);  // the same at every layer: the target decides which tokens count
    probes.layers.push_back(fit_probe(x, y, ridge));
  }
  return probes;
}

/// `probes` scored on the second half of the examples' defined tokens: the
/// stack's JSON entry {"positions", "features", "fitted_tokens",
/// "held_out_tokens", "layers"} ("features": the width of the streams after
/// block 1, d_model).
nlohmann::json score_stack(const KeptStack& stack, const at::Tensor& target, const StackProbes& probes) {
  const int64_t b = target.size(0);
  TORCH_CHECK(probes.layers.size() == stack.states.size(), "probe: ", probes.layers.size(), " probes for ",
              stack.states.size(), " streams");
  nlohmann::json layers = nlohmann::json::array();
  for (size_t i = 0; i < probes.layers.size(); ++i) {
    const auto [x, y] = defined_rows(stack.states[i], target, b / 2, b - b / 2);
    std::vector<TargetMean> by_target;
    const ProbeFit fit = score_probe(probes.layers[i], x, y, &by_target);
    nlohmann::json means = nlohmann::json::array();
    for (const TargetMean& m : by_target)
      means.push_back({{"target", m.target}, {"mean_prediction", m.mean_prediction}, {"tokens", m.rows}});
    layers.push_back({{"layer", i},
                      {"reads", reads(static_cast<int64_t>(i), stack)},
                      {"r2", fit.r2},
                      {"mean_abs_error", fit.mean_abs_error},
                      {"rounded_accuracy", fit.rounded_accuracy},
                      {"class_accuracy", fit.class_accuracy},
                      {"logistic_accuracy", std::isnan(fit.logistic_accuracy) ? nlohmann::json(nullptr)
                                                                              : nlohmann::json(fit.logistic_accuracy)},
                      {"baseline_accuracy", fit.baseline_accuracy},
                      {"by_target", means}});
  }
  return {{"positions", target.size(1)},
          {"features", stack.states.empty() ? 0 : stack.states.back().size(2)},
          {"fitted_tokens", probes.tokens},
          {"held_out_tokens", defined_tokens(target, b / 2, b - b / 2)},
          {"layers", layers}};
}

/// The stacks `model` runs over `length`'s fixed examples, each with its target (B, L').
struct ProbedLength {
  std::vector<KeptStack> stacks;
  std::vector<at::Tensor> targets;
};

ProbedLength probed_length(Transformer& model, const Task& task, const Config& cfg, const ProbeRequest& r,
                           int64_t length) {
  const TaskBatch set = task.fixed_set(length, r.samples, cfg.eval.seed);
  // The target first: a task refuses one its config lacks before any forward runs.
  const bool generic = r.target == kPositionTarget || r.target == kRemainingTarget;
  const at::Tensor row_values = generic ? at::Tensor() : task.probe_target(r.target, length, r.samples, cfg.eval.seed);
  TORCH_CHECK(!row_values.defined() || row_values.sizes() == set.tokens.sizes(), "probe target ", r.target, ": ",
              row_values.sizes(), " values for tokens ", set.tokens.sizes());
  ProbedLength out;
  out.stacks = kept_states(model, set, cfg.eval.max_batch_tokens);
  for (const KeptStack& stack : out.stacks) {
    out.targets.push_back(stack_target(stack, r.target, row_values, set.tokens, task.end_token()));
    require_defined(stack, out.targets.back(), r, length);
  }
  return out;
}

}  // namespace

nlohmann::json probe_checkpoint(const std::string& checkpoint, const ProbeRequest& r) {
  Config cfg;
  Transformer model = load_model(checkpoint, torch::kCPU, &cfg);
  if (r.samples < 4) throw ConfigError(fmt::format("--samples {}: the probe needs at least 4 examples", r.samples));
  const std::unique_ptr<Task> task = make_task(cfg.task);
  const std::string description = probe_target_spec(cfg.task, r.target).description;
  const std::vector<int64_t> lengths = r.lengths.empty() ? std::vector<int64_t>{cfg.task.max_length} : r.lengths;
  const EvaluationSpec spec = evaluation_spec(cfg);
  const bool both = cfg.model.kind == ModelKind::EncoderDecoder;
  const int64_t streams = cfg.model.layers + 1 + (both ? cfg.model.decoder_layers + 1 : 0);
  // Every length is checked, and its memory counted, before any forward runs.
  std::vector<int64_t> all = lengths;
  all.insert(all.end(), r.fit_lengths.begin(), r.fit_lengths.end());
  check_evaluation_lengths(model, *task, spec, all);
  for (const int64_t length : all) {
    const int64_t tokens = task->sequence_length(length);
    const double kept = static_cast<double>(streams) * r.samples * model->model_length(tokens) * cfg.model.d_model *
                        (cfg.model.qkv == Qkv::Embedded ? 3 : 1) * 4.0;
    require_memory(evaluation_memory_bytes(model, tokens, r.samples, cfg.eval.max_batch_tokens) + 2 * kept, torch::kCPU,
                   fmt::format("probing length {}", length),
                   fmt::format("{} examples, {} residual streams kept", r.samples, streams),
                   "choose fewer --samples or a shorter length");
  }

  // With --fit-lengths, one set of probes per stack, fitted on those lengths together, reads every length.
  std::vector<StackProbes> fixed;  // [stack]
  if (!r.fit_lengths.empty()) {
    std::vector<ProbedLength> fits;
    for (const int64_t length : r.fit_lengths) fits.push_back(probed_length(model, *task, cfg, r, length));
    for (size_t s = 0; s < fits.front().stacks.size(); ++s) {
      std::vector<std::pair<const KeptStack*, at::Tensor>> sides;
      for (const ProbedLength& f : fits) sides.emplace_back(&f.stacks[s], f.targets[s]);
      fixed.push_back(fit_stack(sides, r.ridge));
    }
  }
  nlohmann::json per_length = nlohmann::json::array();
  for (const int64_t length : lengths) {
    const ProbedLength probed = probed_length(model, *task, cfg, r, length);
    std::vector<nlohmann::json> sides;
    int64_t fitted_examples = 0;
    for (size_t s = 0; s < probed.stacks.size(); ++s) {
      const KeptStack& stack = probed.stacks[s];
      const at::Tensor& target = probed.targets[s];
      const StackProbes probes = fixed.empty() ? fit_stack({{&stack, target}}, r.ridge) : fixed[s];
      fitted_examples = probes.examples;  // here, or at --fit-lengths
      sides.push_back(score_stack(stack, target, probes));
    }
    nlohmann::json entry = sides[0];
    entry["length"] = length;
    const int64_t b = probed.targets[0].size(0);  // a task may hold fewer examples of a length than asked
    entry["fitted_examples"] = fitted_examples;
    entry["held_out_examples"] = b - b / 2;
    if (both) entry["decoder"] = sides[1];
    per_length.push_back(entry);
  }
  return {{"checkpoint", checkpoint},
          {"scheme", cfg.model.positional.type},
          {"input_scheme", cfg.model.positional.input},
          {"with_scheme", cfg.model.positional.with},
          {"task", cfg.task.type},
          {"target", r.target},
          {"target_description", description},
          {"kind", name_of(cfg.model.kind)},
          {"qkv", name_of(cfg.model.qkv)},
          {"ridge", r.ridge},
          {"fit_lengths", r.fit_lengths},
          {"trained_lengths", {cfg.task.min_length, cfg.task.max_length}},
          {"lengths", per_length}};
}

}  // namespace posenc
