#include "posenc/analysis/probe.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "posenc/config.h"
#include "posenc/errors.h"
#include "posenc/model/decoder.h"
#include "posenc/model/encoder.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluate.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/text.h"

namespace posenc {

ProbeFit fit_linear_probe(const at::Tensor& features, const at::Tensor& target, int64_t train_rows, double ridge) {
  TORCH_CHECK(features.dim() == 2 && target.dim() == 1 && features.size(0) == target.size(0),
              "fit_linear_probe: expected features (N, F) and target (N), got ", features.sizes(), " and ",
              target.sizes());
  const int64_t n = features.size(0);
  TORCH_CHECK(train_rows >= 2 && n - train_rows >= 2, "fit_linear_probe: ", train_rows, " fitted rows of ", n,
              ": at least 2 on each side");
  const auto x = features.to(torch::kCPU, torch::kFloat64);  // (N, F)
  const auto y = target.to(torch::kCPU, torch::kFloat64);    // (N)
  auto x_fit = x.narrow(0, 0, train_rows), x_held = x.narrow(0, train_rows, n - train_rows);
  auto y_fit = y.narrow(0, 0, train_rows), y_held = y.narrow(0, train_rows, n - train_rows);

  // Standardise by the fitted rows alone; a feature constant there carries nothing to fit.
  const auto mean = x_fit.mean(0);                           // (F)
  const auto spread = (x_fit - mean).pow(2).mean(0).sqrt();  // (F), the population spread
  const auto kept = spread.gt(1e-12 * (1.0 + mean.abs().max().item<double>()));
  const auto scale = torch::where(kept, spread, torch::ones_like(spread));
  const auto z_fit = (x_fit - mean) / scale * kept;  // (Nf, F), dropped features 0
  const auto z_held = (x_held - mean) / scale * kept;
  const double y_mean = y_fit.mean().item<double>();

  // (ZᵀZ + λ Nf I) w = Zᵀ (y - ȳ): the normal equations of ridge regression.
  const int64_t f = x.size(1);
  const auto gram = z_fit.t().matmul(z_fit) + ridge * static_cast<double>(train_rows) * torch::eye(f, x.options());
  const auto rhs = z_fit.t().matmul(y_fit - y_mean).unsqueeze(1);  // (F, 1)
  const auto w = torch::linalg_solve(gram, rhs).squeeze(1);        // (F)

  const auto predicted = z_held.matmul(w) + y_mean;  // (Nh)
  ProbeFit fit;
  const double total = (y_held - y_held.mean()).pow(2).sum().item<double>();
  const double residual = (predicted - y_held).pow(2).sum().item<double>();
  fit.r2 = total > 0 ? 1.0 - residual / total : 0.0;
  fit.mean_abs_error = (predicted - y_held).abs().mean().item<double>();
  fit.rounded_accuracy = predicted.round().eq(y_held).to(torch::kFloat64).mean().item<double>();
  // The most common fitted value (the smallest of equals), as a probe that reads nothing would answer.
  std::map<double, int64_t> counts;
  const auto fitted = y_fit.round().contiguous();
  for (int64_t i = 0; i < train_rows; ++i) ++counts[fitted.data_ptr<double>()[i]];
  const double mode =
      std::max_element(counts.begin(), counts.end(), [](auto a, auto b) { return a.second < b.second; })->first;
  fit.baseline_accuracy = y_held.eq(mode).to(torch::kFloat64).mean().item<double>();
  return fit;
}

std::vector<ProbeFit> probe_target_values(const std::vector<at::Tensor>& states, const at::Tensor& target,
                                          int64_t train_examples, double ridge) {
  std::vector<ProbeFit> fits;
  for (const auto& s : states) {
    TORCH_CHECK(s.dim() == 3, "probe_target_values: expected states (B, L, F), got ", s.sizes());
    const int64_t b = s.size(0), l = s.size(1);
    TORCH_CHECK(target.dim() == 2 && target.size(0) == b && target.size(1) == l,
                "probe_target_values: expected a target (B, L) = (", b, ", ", l, "), got ", target.sizes());
    TORCH_CHECK(train_examples >= 1 && train_examples < b, "probe_target_values: ", train_examples,
                " fitted examples of ", b);
    // Rows example-major, so the fitted examples' tokens come first; only defined targets are kept.
    const auto features = s.reshape({b * l, s.size(2)});                           // (B·L, F)
    const auto values = target.to(torch::kCPU, torch::kFloat64).reshape({b * l});  // (B·L)
    const auto defined = values.isfinite();
    const int64_t fitted = defined.narrow(0, 0, train_examples * l).sum().item<int64_t>();
    fits.push_back(fit_linear_probe(features.index({defined}), values.index({defined}), fitted, ridge));
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

/// What kept residual stream `layer` (0-based) is, in words.
std::string reads(int64_t layer, int64_t layers) {
  if (layer == 0) return "the input of block 1 (tokens and any positions added to them)";
  if (layer == layers) return fmt::format("the output of block {} (before the final LayerNorm)", layers);
  return fmt::format("the input of block {}", layer + 1);
}

/// The residual streams of `tokens` (B, T), forwarded in chunks the
/// evaluation's memory bound allows; each (B, L, F) on the CPU.
std::vector<at::Tensor> kept_states(Transformer& model, const at::Tensor& tokens, const at::Tensor& task_positions,
                                    int64_t max_batch_tokens) {
  const int64_t chunk = evaluation_batch_size(model, tokens.size(1), max_batch_tokens);
  std::vector<std::vector<at::Tensor>> parts;
  model->eval();
  c10::InferenceMode guard;
  model->keep_hidden_states(true);  // each forward keeps its own chunk's streams
  for (int64_t start = 0; start < tokens.size(0); start += chunk) {
    throw_if_interrupted();
    const int64_t n = std::min(chunk, tokens.size(0) - start);
    const auto rows = tokens.narrow(0, start, n);
    if (auto* decoder = model->as<DecoderImpl>())
      decoder->forward(rows, {}, task_positions.defined() ? task_positions.narrow(0, start, n) : at::Tensor());
    else
      classifier_of(model, "probe").forward(rows);
    const auto& states = model->hidden_states();
    if (parts.empty()) parts.resize(states.size());
    for (size_t i = 0; i < states.size(); ++i) parts[i].push_back(states[i].to(torch::kCPU));
  }
  model->keep_hidden_states(false);
  std::vector<at::Tensor> out;
  for (const auto& p : parts) out.push_back(torch::cat(p, /*dim=*/0));
  return out;
}

/// What `target` is for this task; ConfigError naming the task's targets if it has no such one.
std::string target_description(const TaskInfo& task, const std::string& target) {
  if (target == kPositionTarget) return "each token's index in what the model reads (0 for the first)";
  std::vector<std::string> known = {kPositionTarget};
  for (const ProbeTargetSpec& t : task.probe_targets) {
    if (t.name == target) return t.description;
    known.push_back(t.name);
  }
  throw ConfigError(
      fmt::format("--target {}: task {} has no such probe target (it has: {})", target, task.name, join(known, ", ")));
}

/// The target of each token the model reads of fixed_set(length, n, seed):
/// (n, read) float64, NaN where undefined. A decoder reads every token but the
/// last; an encoder with CLS pooling reads CLS before the tokens.
at::Tensor target_values(const Task& task, const std::string& target, int64_t length, int64_t n, int64_t seed,
                         int64_t read) {
  if (target == kPositionTarget) return torch::arange(read, torch::kFloat64).repeat({n, 1});
  const at::Tensor values = task.probe_target(target, length, n, seed);  // (n, T) aligned with the task's tokens
  const int64_t tokens = values.size(1);
  TORCH_CHECK(tokens == read + 1 || tokens == read || tokens + 1 == read, "probe target ", target, ": ", tokens,
              " tokens where the model reads ", read);
  if (tokens > read) return values.narrow(1, 0, read);  // a decoder's last token
  if (tokens < read)                                    // CLS first, where no target is defined
    return torch::cat({torch::full({values.size(0), read - tokens}, std::nan(""), torch::kFloat64), values}, 1);
  return values;
}

}  // namespace

nlohmann::json probe_checkpoint(const std::string& checkpoint, const ProbeRequest& r) {
  Config cfg;
  Transformer model = load_model(checkpoint, torch::kCPU, &cfg);
  if (cfg.model.kind == ModelKind::EncoderDecoder)
    throw ConfigError(checkpoint +
                      ": probe reads the stack of an encoder or a decoder (model.kind=encoder_decoder is not one)");
  if (r.samples < 4) throw ConfigError(fmt::format("--samples {}: the probe needs at least 4 examples", r.samples));
  const std::unique_ptr<Task> task = make_task(cfg.task);
  const std::string description = target_description(task->info(), r.target);
  const std::vector<int64_t> lengths = r.lengths.empty() ? std::vector<int64_t>{cfg.task.max_length} : r.lengths;
  const EvaluationSpec spec = evaluation_spec(cfg);
  // Every length is checked, and its memory counted, before any forward runs.
  check_evaluation_lengths(model, *task, spec, lengths);
  for (const int64_t length : lengths) {
    const int64_t tokens = task->sequence_length(length);
    const double kept = static_cast<double>(cfg.model.layers + 1) * r.samples * model->model_length(tokens) *
                        cfg.model.d_model * (cfg.model.qkv == Qkv::Embedded ? 3 : 1) * 4.0;
    require_memory(evaluation_memory_bytes(model, tokens, r.samples, cfg.eval.max_batch_tokens) + 2 * kept, torch::kCPU,
                   fmt::format("probing length {}", length),
                   fmt::format("{} examples, {} residual streams kept", r.samples, cfg.model.layers + 1),
                   "choose fewer --samples or a shorter length");
  }

  // A decoder reads every token but the last (which it only predicts).
  const bool decoder = model->is_decoder();
  nlohmann::json per_length = nlohmann::json::array();
  for (const int64_t length : lengths) {
    const TaskBatch set = task->fixed_set(length, r.samples, cfg.eval.seed);
    const auto tokens = decoder ? set.tokens.narrow(1, 0, set.tokens.size(1) - 1) : set.tokens;  // (B, L)
    const auto ids = set.positions.defined() && decoder ? set.positions.narrow(1, 0, tokens.size(1)) : at::Tensor();
    const auto states = kept_states(model, tokens, ids, cfg.eval.max_batch_tokens);
    const int64_t b = tokens.size(0), read = states.front().size(1);
    const auto target = target_values(*task, r.target, length, r.samples, cfg.eval.seed, read);  // (B, read)
    const auto defined = target.isfinite();
    const int64_t fitted = defined.narrow(0, 0, b / 2).sum().item<int64_t>();
    const int64_t held_out = defined.sum().item<int64_t>() - fitted;
    if (fitted < 2 || held_out < 2)
      throw ConfigError(
          fmt::format("--target {}: defined at {} fitted and {} held-out tokens of length {}; the probe "
                      "needs 2 of each: choose more --samples or a longer length",
                      r.target, fitted, held_out, length));
    const auto fits = probe_target_values(states, target, b / 2, r.ridge);
    nlohmann::json layers = nlohmann::json::array();
    for (size_t i = 0; i < fits.size(); ++i)
      layers.push_back({{"layer", i},
                        {"reads", reads(static_cast<int64_t>(i), cfg.model.layers)},
                        {"r2", fits[i].r2},
                        {"mean_abs_error", fits[i].mean_abs_error},
                        {"rounded_accuracy", fits[i].rounded_accuracy},
                        {"baseline_accuracy", fits[i].baseline_accuracy}});
    per_length.push_back({{"length", length},
                          {"positions", read},
                          {"fitted_examples", b / 2},
                          {"held_out_examples", b - b / 2},
                          {"fitted_tokens", fitted},
                          {"held_out_tokens", held_out},
                          {"layers", layers}});
  }
  return {{"checkpoint", checkpoint},
          {"scheme", cfg.model.positional.type},
          {"input_scheme", cfg.model.positional.input},
          {"task", cfg.task.type},
          {"target", r.target},
          {"target_description", description},
          {"kind", name_of(cfg.model.kind)},
          {"qkv", name_of(cfg.model.qkv)},
          {"ridge", r.ridge},
          {"trained_lengths", {cfg.task.min_length, cfg.task.max_length}},
          {"lengths", per_length}};
}

}  // namespace posenc
