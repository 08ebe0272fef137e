// The memory and length checks made before anything runs (train/fits.h).
#include "posenc/train/fits.h"

#include <algorithm>

#include <fmt/format.h>

#include "posenc/compat.h"
#include "posenc/tasks/registry.h"
#include "posenc/util/memory_budget.h"
#include "posenc/util/text.h"

namespace posenc {

namespace {

/// Whether a pass of `model` on `device` holds the (B, H, L, L) attention
/// probabilities. On CUDA the fused kernel of LibTorch 2.x does not (only the
/// additive bias and mask, one (H, L, L) each); on the CPU the estimate keeps
/// them, an upper bound whichever kernel LibTorch picks.
bool holds_attention_scores(const Transformer& model, torch::Device device) {
  return !(device.is_cuda() && model->fuses_attention());
}

/// Bytes of the attention tensors of one layer for `batch` examples of L positions:
/// `per_example` (B, H, L, L) float tensors where scores are held, else the bias and mask.
double attention_bytes(const Transformer& model, torch::Device device, double batch, double L, double per_example) {
  const double square = static_cast<double>(model->config().heads) * L * L * 4.0;
  return holds_attention_scores(model, device) ? per_example * batch * square : 2.0 * square;
}

}  // namespace

double evaluation_memory_bytes(const Transformer& model, int64_t tokens, int64_t samples, int64_t max_batch_tokens,
                               torch::Device device) {
  const double L = static_cast<double>(model->model_length(tokens));
  const double B = static_cast<double>(std::min(samples, evaluation_batch_size(model, tokens, max_batch_tokens)));
  const auto& m = model->config();
  const double set = 2.0 * 8.0 * static_cast<double>(samples) * tokens;  // int64 tokens, and a copy
  const double activations = B * 4.0 * 12.0 * L * std::max(m.d_model, m.d_ff);
  return set + activations + attention_bytes(model, device, B, L, /*per_example=*/4.0);
}

namespace {

/// The memory to check a computation against: on the CPU the least of what
/// the system, the address-space limit and the cgroup leave (memory_budget.h),
/// on CUDA the device's free memory (with -DPOSENC_CUDA=ON); 0 bytes (nothing
/// to check) where unknown.
MemoryBudget available_memory(torch::Device device) {
  if (device.is_cuda())
    return {compat::cuda_free_memory_bytes(device.has_index() ? device.index() : 0), "free on " + device.str()};
  if (!device.is_cpu()) return {};
  return cpu_memory_budget();
}

/// "memory" on the CPU, "memory of cuda:0" on a GPU.
std::string memory_of(torch::Device device) { return device.is_cpu() ? "memory" : "memory of " + device.str(); }

}  // namespace

void require_memory(double need, torch::Device device, const std::string& what, const std::string& detail,
                    const std::string& advice) {
  const MemoryBudget budget = available_memory(device);
  if (budget.bytes <= 0 || need <= budget.bytes) return;
  throw ConfigError(fmt::format("{} needs about {} of {} ({}), but {}; {}", what, format_bytes(need), memory_of(device),
                                detail, describe_budget(budget), advice));
}

namespace {

/// The operand grid's largest cell (two operands of its most digits): the
/// digits and the tokens of an example; {0, 0} without a grid.
std::pair<int64_t, int64_t> largest_operand_cell(const Task& task, const EvaluationSpec& spec) {
  const auto& grid = spec.sets.operand_grid;
  if (grid.empty() || !task.info().has_operands) return {0, 0};
  const int64_t digits = *std::max_element(grid.begin(), grid.end());
  return {digits, task.operand_sequence_length(digits, digits)};
}

}  // namespace

void check_evaluation_lengths(const Transformer& model, const Task& task, const EvaluationSpec& spec,
                              const std::vector<int64_t>& lengths) {
  if (spec.sets.oracle_length && (task.info().metric != TaskMetric::ExactMatch || task.end_token() == 0))
    throw ConfigError("eval.oracle_length: task " + task.info().name +
                      "'s answers do not end with an end token, so there is no end to hold back (it applies to "
                      "decoded answers of varying length, such as scan's and translation's)");
  if (spec.sets.wrong_answers > 0 && task.info().metric == TaskMetric::Perplexity)
    throw ConfigError("eval.wrong_answers: task " + task.info().name +
                      " is scored by perplexity, next token by next token, so there is no wrong answer to keep "
                      "(it keeps misclassified examples and wrongly decoded answers)");
  for (int64_t length : lengths) {
    task.check_eval_length(length);
    model->check_length(task.sequence_length(length), spec.training_positions_end > 0);
  }
  if (const auto [digits, tokens] = largest_operand_cell(task, spec); digits > 0) {
    task.check_eval_length(digits);
    try {
      model->check_length(tokens, spec.training_positions_end > 0);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("eval.operand_grid: the cell of two {}-digit operands: {}", digits, e.what()));
    }
  }
}

void check_evaluation_fits(const Transformer& model, const Task& task, const EvaluationSpec& spec,
                           const std::vector<int64_t>& lengths, torch::Device device) {
  check_evaluation_lengths(model, task, spec, lengths);
  if (const auto [digits, tokens] = largest_operand_cell(task, spec); digits > 0)
    require_memory(
        evaluation_memory_bytes(model, tokens, spec.sets.samples_per_length, spec.sets.max_batch_tokens, device),
        device, fmt::format("the operand grid's cell of two {}-digit operands", digits),
        fmt::format("{} examples of {} tokens", spec.sets.samples_per_length, tokens),
        "lower eval.max_batch_tokens or eval.samples_per_length, or leave the largest digits out of eval.operand_grid");
  for (int64_t length : lengths) {
    const int64_t tokens = task.sequence_length(length);
    const int64_t batch = evaluation_batch_size(model, tokens, spec.sets.max_batch_tokens);
    const std::string widest = task.widest_data();
    require_memory(
        evaluation_memory_bytes(model, tokens, spec.sets.samples_per_length, spec.sets.max_batch_tokens, device),
        device, fmt::format("evaluation at length {}{}", length, widest.empty() ? "" : " with " + widest),
        fmt::format("{} examples, {} at a time", spec.sets.samples_per_length, batch),
        !widest.empty() ? "shorten or leave out that line"
        : batch > 1     ? "lower eval.max_batch_tokens or eval.samples_per_length"
                        : "evaluate shorter lengths");
  }
}

double training_memory_bytes(const Transformer& model, int64_t tokens, int64_t batch_size, torch::Device device) {
  const auto& m = model->config();
  const double L = static_cast<double>(model->model_length(tokens)), B = static_cast<double>(batch_size);
  double parameters = 0;
  for (const auto& p : model->parameters()) parameters += static_cast<double>(p.numel());
  // Weights, gradients and AdamW's two moments; per layer, kept for the backward
  // pass: scores, probabilities and their gradient (B, H, L, L) where the
  // attention is not fused, and the activations (B, L, max(D, d_ff)) of about a
  // dozen intermediate tensors.
  const double per_layer =
      attention_bytes(model, device, B, L, /*per_example=*/3.0) + 4.0 * 12.0 * B * L * std::max(m.d_model, m.d_ff);
  return 16.0 * parameters + m.layers * per_layer;
}

double model_parameters_at_least(const ModelConfig& m, int64_t vocab_size) {
  // The token table, the decoder's output head, and per block the attention's
  // output projection and the feed-forward pair (the q/k/v projections, norms
  // and the schemes' own parameters come on top).
  const double D = static_cast<double>(m.d_model), F = static_cast<double>(m.d_ff);
  const double V = static_cast<double>(vocab_size) + 2.0;
  const double table =
      m.token_embedding == TokenEmbedding::Numeric ? 0.0 : V * D * (m.qkv == Qkv::Embedded ? 3.0 : 1.0);
  const double head = m.kind == ModelKind::Encoder ? 0.0 : D * V;
  const double blocks = static_cast<double>(m.layers + (m.kind == ModelKind::EncoderDecoder ? m.decoder_layers : 0)) *
                        (D * D + 2.0 * D * F);
  return table + head + blocks;
}

void check_model_fits(const ModelConfig& m, int64_t vocab_size, torch::Device device, int copies) {
  const double parameters = model_parameters_at_least(m, vocab_size);
  const double V = static_cast<double>(vocab_size), D = static_cast<double>(m.d_model);
  require_memory(copies * 16.0 * parameters, device,
                 copies == 1 ? std::string("the model") : fmt::format("--nproc {}", copies),
                 fmt::format("{}at least {:.3g} parameters at 4 bytes, with their gradients and AdamW's two moments",
                             copies == 1 ? "" : fmt::format("{} ranks, each a model of ", copies), parameters),
                 copies == 1 ? "lower model.d_model, model.d_ff or model.layers" +
                                   std::string(V * D > parameters / 2 ? ", or the vocabulary (task.vocab_size)" : "")
                             : "start fewer ranks");
}

void check_training_fits(const Transformer& model, int64_t tokens, int64_t batch_size, torch::Device device,
                         const std::string& widest) {
  const auto& m = model->config();
  require_memory(training_memory_bytes(model, tokens, batch_size, device), device,
                 widest.empty() ? std::string("a training step at task.max_length")
                                : "a training step at task.max_length with " + widest,
                 fmt::format("{} examples of {} tokens, {} layers x {} heads, with the weights, gradients and "
                             "AdamW's moments",
                             batch_size, model->model_length(tokens), m.layers, m.heads),
                 widest.empty() ? "lower train.batch_size or task.max_length"
                                : "shorten or leave out that line, or lower train.batch_size");
}

double run_memory_bytes(const Config& cfg, torch::Device device) {
  const Transformer model(cfg.model, task_vocab_size(cfg.task));
  const auto task = make_task(cfg.task);
  double need = training_memory_bytes(model, task->sequence_length(cfg.task.max_length), cfg.train.batch_size, device);
  const EvaluationSpec spec = evaluation_spec(cfg);
  for (int64_t length : cfg.eval.lengths)
    need = std::max(need, evaluation_memory_bytes(model, task->sequence_length(length), spec.sets.samples_per_length,
                                                  spec.sets.max_batch_tokens, device));
  return need;
}

void check_generation_fits(const Transformer& model, int64_t prompt, int64_t tokens, torch::Device device) {
  const auto& m = model->config();
  // With a KV cache: the prompt's forward pass, then the cached keys and values
  // (2 per layer, tokens x d_model) and one row of scores per step; without
  // one, a full forward pass over the whole sequence at each step.
  const double need = model->supports_kv_cache()
                          ? evaluation_memory_bytes(model, prompt, 1, prompt, device) +
                                4.0 * (2.0 * m.layers * tokens * m.d_model + 4.0 * m.heads * tokens)
                          : evaluation_memory_bytes(model, tokens, 1, tokens, device);
  require_memory(need, device, fmt::format("generating up to {} tokens", tokens),
                 model->supports_kv_cache() ? "with a KV cache" : "the whole sequence at each token",
                 "ask for fewer --tokens or a shorter --prompt");
}

}  // namespace posenc
