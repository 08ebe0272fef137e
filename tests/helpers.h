// Small helpers shared by the test files.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "tolerances.h"
#include "posenc/config.h"
#include "posenc/experiments/compare_plan.h"
#include "posenc/model/attention.h"
#include "posenc/model/encoder_decoder.h"
#include "posenc/tasks/registry.h"
#include "posenc/positional/scheme.h"
#include "posenc/train/checkpoint.h"

namespace posenc::testing {

/// A config from the defaults with `path=value` overrides applied.
inline Config config_with(const std::vector<std::string>& overrides) {
  json j = json::object();
  for (const auto& o : overrides) apply_override(j, o);
  return config_from_json(j);
}
inline Config config_with(std::initializer_list<std::string> overrides) {
  return config_with(std::vector<std::string>(overrides));
}

/// A nested JSON array of numbers (as `posenc inspect` writes them) as a float64 tensor of its shape.
inline torch::Tensor tensor_of(const json& nested) {
  std::vector<double> flat;
  std::vector<int64_t> shape;
  const json* level = &nested;
  while (level->is_array()) {
    shape.push_back(static_cast<int64_t>(level->size()));
    level = &(*level)[0];
  }
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_array())
      for (const auto& e : j) walk(e);
    else
      flat.push_back(j.get<double>());
  };
  walk(nested);
  return torch::tensor(flat, torch::kFloat64).view(shape);
}

/// A scheme built from its registry entry with default options (plus overrides).
inline PositionalScheme scheme_with(const std::string& type, const SchemeContext& ctx,
                                    const json& options = json::object()) {
  const auto& info = find_scheme(type);
  return info.make(ctx, resolve_scheme_options(info, options, "test"));
}

/// Attention of `options` fed q, k, v directly (no projection), in float64 and
/// eval mode, keeping its weights: for checks against a rule written as a loop.
inline MultiHeadAttention float64_attention(MultiHeadAttentionOptions options) {
  MultiHeadAttention attention(options.project_input(false));
  attention->to(torch::kFloat64);
  attention->eval();
  attention->keep_weights(true);
  return attention;
}

/// q·k / sqrt(Dh) per head: (H, L, L) from q, k (1, L, H * Dh), as attention computes its logits.
inline torch::Tensor per_head_logits(const torch::Tensor& q, const torch::Tensor& k, int64_t heads) {
  const int64_t L = q.size(1), Dh = q.size(2) / heads;
  const auto qh = q.view({L, heads, Dh}).transpose(0, 1), kh = k.view({L, heads, Dh}).transpose(0, 1);
  return torch::matmul(qh, kh.transpose(1, 2)) / std::sqrt(static_cast<double>(Dh));
}

/// A decoder's logits over `tokens` (B, L) fed through `cache`: the first `prompt`
/// tokens at once, then one token a step. -> (B, L, V), as forward(tokens) gives them.
template <typename Model>
torch::Tensor logits_through_cache(Model& model, const torch::Tensor& tokens, int64_t prompt, KVCache& cache) {
  std::vector<torch::Tensor> steps = {model->decode(tokens.narrow(1, 0, prompt), cache)};
  for (int64_t t = prompt; t < tokens.size(1); ++t) steps.push_back(model->decode(tokens.narrow(1, t, 1), cache));
  return torch::cat(steps, 1);
}

/// An encoder_decoder's logits (B, T, V) for `target` (B, T), decoded with `cache` from `source`: its first
/// `prompt` tokens at once, then one at a time.
inline torch::Tensor cached_target_logits(EncoderDecoder& model, const torch::Tensor& source,
                                          const torch::Tensor& target, int64_t prompt, KVCache& cache) {
  model->start_decoding(source, cache);
  return logits_through_cache(model, target, prompt, cache);
}

/// Positions 0..L-1 for queries and keys.
inline Positions arange_positions(int64_t L, ForwardCache* cache = nullptr) {
  auto ids = torch::arange(L, torch::kLong);
  return Positions{ids, ids, L, cache};
}

/// A small next-token model on copy (vocabulary 16, width 32, 4 heads, 2
/// layers, and 2 decoder layers for an encoder_decoder) of `kind`, with the
/// positional scheme `scheme` and `path=value` overrides.
inline Config small_next_token_config(const std::string& kind, const std::string& scheme,
                                      const std::vector<std::string>& extra) {
  json j = json::object();
  for (const std::string o :
       {"task.type=copy", "task.vocab_size=16", "model.d_model=32", "model.heads=4", "model.layers=2", "model.d_ff=64"})
    apply_override(j, o);
  apply_override(j, "model.kind=" + kind);
  if (kind == "encoder_decoder") apply_override(j, "model.decoder_layers=2");
  apply_override(j, "model.positional.type=" + scheme);
  for (const auto& e : extra) apply_override(j, e);
  return config_from_json(j);
}

/// A model of `cfg` over 16 tokens, in eval mode, whose positional parameters
/// are drawn from N(0, 0.5) instead of their (often zero) initial values, so
/// that every scheme acts.
template <typename Model>
Model random_positional_model(const ModelConfig& cfg, uint64_t seed) {
  torch::manual_seed(seed);
  Model model(cfg, 16);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters())
    if (p.key().find("positional") != std::string::npos) p.value().normal_(0.0, 0.5);
  model->eval();
  return model;
}

/// An empty scratch directory name under the system's temp directory (not created).
inline std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("posenc_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

/// The override that keeps a test which compares two runs bit for bit on the CPU.
/// On CUDA two runs of one config already differ in the last bits (kernels such
/// as SDPA's memory-efficient backward accumulate with atomics, in whatever
/// order the GPU schedules them), and AdamW turns those into visible
/// differences within ten steps; CUDA's resume is checked with a tolerance in
/// test_cuda_graphs.cpp.
inline constexpr const char* kBitExactDevice = "train.device=\"cpu\"";

/// A tiny ordering run (seconds) writing to `dir`, plus `path=value` overrides.
inline Config small_config(const std::filesystem::path& dir, const std::vector<std::string>& extra = {}) {
  json j = json::object();
  for (const auto* o :
       {"model.d_model=32", "model.heads=2", "model.layers=2", "model.d_ff=64", "task.vocab_size=16",
        "task.min_length=4", "task.max_length=8", "train.batch_size=32", "train.log_every=10", "train.eval_every=1000",
        "train.val_samples=200", "eval.samples_per_length=200", "eval.lengths=[8,16]", "train.warmup_steps=20"})
    apply_override(j, o);
  apply_override(j, "train.out_dir=" + json(dir.string()).dump());
  for (const auto& e : extra) apply_override(j, e);
  return config_from_json(j);
}

/// The message of the ConfigError that `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

/// The error reading a config of these overrides gives, or "(no error)".
inline std::string config_error(std::initializer_list<std::string> overrides) {
  return error_of([&] {
    json j = json::object();
    for (const auto& s : overrides) apply_override(j, s);
    config_from_json(j);
  });
}

/// The parameters stored in a checkpoint, in model order.
inline std::vector<torch::Tensor> parameters_of(const std::string& ckpt) {
  auto model = load_model(ckpt, torch::kCPU);
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

/// The training losses a run logged (metrics.jsonl's lines with a loss): step -> loss.
inline std::map<int64_t, double> logged_losses(const std::filesystem::path& run) {
  std::map<int64_t, double> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = json::parse(line);
    if (j.contains("loss")) out[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  return out;
}

/// Checks that the shipped config `config` (relative to the source tree) trains
/// what the run `row` of the grid `grid` trained: the two are equal but for
/// the evaluation and the run directory, and for what `evaluation_only` copies
/// from the shipped config into the row (keys that change no training step).
/// Returns the shipped config.
inline Config expect_shipped_config_trains_grid_row(
    const std::string& config, const std::string& grid, const std::string& row,
    const std::function<void(const Config& shipped, Config& trained)>& evaluation_only = {}) {
  const std::string root = POSENC_SOURCE_DIR;
  const Config shipped = config_from_json(read_json_file(root + "/" + config));
  const auto plan = plan_comparison(root + "/" + grid, "out", false, 1);
  const auto run = std::find_if(plan.runs.begin(), plan.runs.end(), [&](const auto& r) { return r.id == row; });
  if (run == plan.runs.end()) {
    ADD_FAILURE() << grid << " has no run " << row;
    return shipped;
  }
  Config trained = run->config;
  trained.eval = shipped.eval;
  trained.train.out_dir = shipped.train.out_dir;
  if (evaluation_only) evaluation_only(shipped, trained);
  EXPECT_EQ(config_to_json(shipped), config_to_json(trained)) << config << " against " << grid << "'s " << row;
  return shipped;
}

}  // namespace posenc::testing
