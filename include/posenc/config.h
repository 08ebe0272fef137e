// Typed configuration and its strict JSON parsing.
//
// Every key is known: an unknown key, a wrong type or an out-of-range value is
// a ConfigError naming the JSON path and what was expected. The resolved
// config (all defaults filled in) round-trips through to_json().
// Not here: the options of a positional scheme or a task, which their registry
// entries declare (options.h validates them).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/errors.h"
#include "posenc/options.h"

namespace posenc {

using json = nlohmann::json;

struct PositionalConfig {
  /// Scheme name from the registry (`posenc list`).
  std::string type = "rope";
  /// "input" (before block 1 only), "every_layer", or "auto" (the scheme's natural place).
  std::string apply_to = "auto";
  /// One scheme module for all layers, or one per layer.
  bool share_across_layers = true;
  /// The scheme's own options, resolved against its registry entry (defaults filled in).
  json options = json::object();
  /// Randomized positions (`randomize: {"max_position": N}`): training batches
  /// take sorted random ids from [0, N) instead of 0..L-1; 0 = off.
  int64_t randomize_max_position = 0;
  /// encoder_decoder only: the scheme of the decoder's cross-attention (queries
  /// at target positions, keys at source positions); "none" by default, as in
  /// Vaswani et al. and T5. Given as a name, or as {"type": name, options...}.
  std::string cross = "none";
  json cross_options = json::object();
  /// A second scheme at the input (encoder or decoder): one that adds to the
  /// residual stream before block 1 (learned, sinusoidal), beside `type` acting
  /// in attention (rope, fire, alibi, ...), as McLeish et al. pair Abacus with
  /// FIRE. Where the task defines position ids (task.positions), this scheme
  /// reads them and `type` counts 0..L-1. "none": `type` alone.
  std::string input = "none";
  json input_options = json::object();
  /// Where the input slot holds a scheme and the task defines position ids:
  /// "input" (the input scheme reads them; `type` counts 0..L-1) or "both"
  /// (`type` reads them in attention too, e.g. coupled ids at the input and a
  /// bias over their differences).
  std::string task_ids = "input";
};

/// The values of model.pooling and model.token_embedding, with what each does
/// (for the config reader and `posenc list`).
struct ModelChoice {
  std::string key, value, doc;
};
const std::vector<ModelChoice>& model_choices();

struct ModelConfig {
  /// "encoder" (bidirectional, pooled, classifies) | "decoder" (causal mask,
  /// next-token head) | "encoder_decoder" (a bidirectional encoder over the
  /// source, a causal decoder with cross-attention over the target); a task
  /// names the kinds it trains (tasks/registry.h).
  std::string kind = "encoder";
  int64_t d_model = 64;
  int64_t heads = 4;
  /// Blocks of the encoder, or of the decoder for model.kind=decoder.
  int64_t layers = 3;
  /// encoder_decoder: the decoder's blocks (0 = as many as `layers`).
  int64_t decoder_layers = 0;
  int64_t d_ff = 256;
  double dropout = 0.0;
  /// "cls" | "mean" | "max" | "lse" (the encoder's; the decoder predicts at
  /// every position). lse: per feature, tau * log(mean_i exp(x_i / tau)) with a
  /// learned temperature tau per feature, between mean (large tau) and max (small).
  std::string pooling = "max";
  /// "table" (one learned row per token) | "numeric" (an encoder's token values
  /// through fixed sinusoidal features and a learned projection: model/numeric_embedding.h)
  std::string token_embedding = "table";
  /// "projected" (W_qkv) | "embedded" (after Attention Positional Encoding, Bhorania: the token table yields q, k, v for block 1)
  std::string qkv = "projected";
  PositionalConfig positional;
};

/// The task (tasks/registry.h). Each task takes type, min_length, max_length
/// and the options its registry entry declares (`posenc list`); any other key
/// is an error naming the task.
struct TaskConfig {
  std::string type = "ordering";
  /// Training lengths, in the task's unit (tokens; digits for addition; context for charlm).
  int64_t min_length = 4;
  int64_t max_length = 16;
  /// The task's own options, resolved against its registry entry (defaults filled in).
  Options options;
};

struct TrainConfig {
  int64_t steps = 3000;
  int64_t batch_size = 64;
  double lr = 1e-3;
  double weight_decay = 0.01;
  int64_t warmup_steps = 200;
  /// The cosine schedule decays to lr * min_lr_ratio.
  double min_lr_ratio = 0.1;
  double grad_clip = 1.0;
  int64_t eval_every = 500;
  int64_t val_samples = 1000;
  int64_t checkpoint_every = 1000;
  int64_t log_every = 100;
  int64_t seed = 0;
  /// "auto" | "cpu" | "cuda"
  std::string device = "auto";
  /// Intra-op threads; 1 is fastest for the small models on 2 cores (docs/benchmarks.md).
  int64_t threads = 1;
  /// "float32" | "bf16" (autocast of the forward pass to bfloat16; weights and optimizer stay float32)
  std::string precision = "float32";
  /// "auto" | "on" | "off": capture the training step as a CUDA graph per batch
  /// shape and replay it (train/cuda_graphs.h); auto = on for CUDA where the
  /// shapes repeat and nothing in the step is decided on the host.
  std::string cuda_graphs = "auto";
  std::string out_dir = "runs/ordering";
  /// Several processes on one run (train/data_parallel.h; how many comes from
  /// the launcher, not the config): "auto" (gloo on the CPU, nccl on CUDA) | "gloo" | "nccl"
  std::string backend = "auto";
  /// Gradients are all-reduced in flat buckets of at most this many MiB.
  double bucket_mb = 25;
  /// A collective (or the rendezvous) that waits longer than this fails.
  int64_t collective_timeout_s = 300;
};

struct EvalConfig {
  std::vector<int64_t> lengths = {8, 16, 32, 64, 128};
  int64_t samples_per_length = 2000;
  /// Seed of the fixed evaluation set, independent of train.seed so that every
  /// scheme and seed is scored on the same sequences.
  int64_t seed = 12345;
  /// Maximum tokens per evaluation batch (batch size = max(1, tokens / length)).
  int64_t max_batch_tokens = 65536;
  /// Also decode each answer with its end token held back until the reference's
  /// length (Newman et al. 2020's oracle length): exact match given the length
  /// tells a model that ends too early from one that gets the content wrong.
  bool oracle_length = false;
  /// A task of two operands (addition): exact match for every pair (digits of
  /// a, digits of b) of these lengths, samples_per_length examples each, as
  /// McLeish et al. plot it; empty: none.
  std::vector<int64_t> operand_grid;
};

struct Config {
  ModelConfig model;
  TaskConfig task;
  TrainConfig train;
  EvalConfig eval;
};

/// Parses a full config; throws ConfigError naming the JSON path.
Config config_from_json(const json& j);
json config_to_json(const Config& c);

/// Parses JSON text strictly: a syntax error, a number beyond a double's range
/// or a key that appears twice in one object (JSON parsers keep the last one
/// silently) is a ConfigError starting with `context`.
json parse_json_strict(const std::string& text, const std::string& context);

/// Reads a JSON file with parse_json_strict; errors name the file (and line for syntax errors).
json read_json_file(const std::string& path);

/// Sets the value at a dotted path (creating objects on the way); errors start with `context`.
void set_json_path(json& j, const std::string& path, const json& value, const std::string& context);

/// Applies one `path=value` override (dotted path; value parsed as JSON, else taken as a string).
void apply_override(json& j, const std::string& assignment);

/// Loads a config file, applies overrides in order, parses strictly.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// The JSON pointer (e.g. "/train/steps") of the first difference between two
/// configs outside the paths starting with one of `may_differ`; "" if none.
std::string first_difference(const Config& a, const Config& b, const std::vector<std::string>& may_differ);

}  // namespace posenc
