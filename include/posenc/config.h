// Typed configuration and its strict JSON parsing.
//
// Every key is known: an unknown key, a wrong type or an out-of-range value is
// a ConfigError naming the JSON path and what was expected. The resolved
// config (all defaults filled in) round-trips through to_json().
//
// A key is its field here (type and default) and one row of its block's key
// table in config.cpp (name, bounds or choices, doc); that row drives parsing,
// config_to_json, `posenc list` and docs/configs.md. The options of a
// positional scheme or a task are declared by their registry entries instead.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/choices.h"
#include "posenc/errors.h"
#include "posenc/options.h"
#include "posenc/tasks/registry.h"

namespace posenc {

using json = nlohmann::json;

struct PositionalConfig {
  /// Scheme name from the registry (`posenc list`).
  std::string type = "rope";
  ApplyTo apply_to = ApplyTo::Auto;
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
  /// A second scheme in the same attention as `type`, its terms added to
  /// type's (positional/scheme_pair.h): PaTH-FoX is type path with fox. It
  /// acts where `type` does (nope_every, apply_to). "none": `type` alone.
  std::string with = "none";
  json with_options = json::object();
  /// Where the input slot holds a scheme and the task defines position ids:
  /// "input" (the input scheme reads them; `type` counts 0..L-1) or "both"
  /// (`type` reads them in attention too, e.g. coupled ids at the input and a
  /// bias over their differences).
  TaskIds task_ids = TaskIds::Input;
  /// 0: `type` acts in every block it is placed in; N >= 2: blocks N, 2N, ...
  /// of each self-attention stack have no scheme (NoPE blocks between
  /// positional ones, as Llama 4 and Yang et al. 2025 interleave them).
  int64_t nope_every = 0;

  /// Whether block `index` (from 0) of a self-attention stack is left without
  /// the scheme by nope_every.
  bool nope_block(int64_t index) const { return nope_every > 0 && (index + 1) % nope_every == 0; }

  /// Where the task defines position ids, whether the scheme of this slot
  /// reads them: the input slot's where there is one (and `type` too with
  /// task_ids "both"), else `type`.
  bool reads_task_ids(bool input_slot) const {
    if (input_slot) return input != "none";
    return input == "none" || task_ids == TaskIds::Both;
  }
};

struct ModelConfig {
  /// A task names the kinds it trains (tasks/registry.h).
  ModelKind kind = ModelKind::Encoder;
  int64_t d_model = 64;
  int64_t heads = 4;
  /// Blocks of the encoder, or of the decoder for model.kind=decoder.
  int64_t layers = 3;
  /// encoder_decoder: the decoder's blocks (0 = as many as `layers`).
  int64_t decoder_layers = 0;
  int64_t d_ff = 256;
  double dropout = 0.0;
  /// The encoder's (a decoder predicts at every position and pools nothing).
  Pooling pooling = Pooling::Max;
  /// numeric: model/numeric_embedding.h.
  TokenEmbedding token_embedding = TokenEmbedding::Table;
  /// model.attention.qkv.
  Qkv qkv = Qkv::Projected;
  /// model.attention.weights: how a query's logits become its weights.
  AttentionWeights attention_weights = AttentionWeights::Softmax;
  /// model.attention.log_length_scale: 0 is the plain softmax; s > 0 the
  /// scalable softmax (logits times s_h log n), s_h learned per head from s.
  double log_length_scale = 0.0;
  /// model.attention.logn_from: 0 is off; N >= 2 multiplies the logits of a
  /// query that sees n > N keys by log n / log N (LogN scaling), no parameter.
  int64_t logn_from = 0;
  /// model.attention.temperature_from: 0 is off; F >= 1 multiplies the logits
  /// of a query that sees n keys by 1 + temperature_beta log(floor(n / F) + 1)
  /// (Llama 4's attention temperature), no parameter.
  int64_t temperature_from = 0;
  double temperature_beta = 0.1;
  /// model.attention.length_scaling_in: the blocks whose attention takes the
  /// factors that grow with the keys seen (log_length_scale, logn_from,
  /// temperature_from).
  LengthScalingIn length_scaling_in = LengthScalingIn::EveryBlock;
  /// model.attention.head_scale: every attention's logits of head h times a
  /// learned lambda_h, 1 at the start (Wang et al. 2024's head-based scale).
  bool head_scale = false;
  /// model.attention.logit_scale: every attention's logits times t, one fixed
  /// number for every head and length (a softmax temperature of 1/t); 1 is off.
  double logit_scale = 1.0;
  /// model.attention.window: 0 is off; W >= 1 limits each query of a
  /// self-attention block to the keys fewer than W token slots away (causal:
  /// itself and the W - 1 before it), except in the blocks that
  /// positional.nope_every leaves without positions.
  int64_t attention_window = 0;
  /// model.attention.qk_norm: every attention's queries and keys are RMS-normalized per head, each with a learned
  /// gain per channel, before any scheme acts on them.
  bool qk_norm = false;
  /// model.attention.qk_norm_over: what QK-norm normalizes, each head's channels or the whole width.
  QkNormOver qk_norm_over = QkNormOver::Head;
  PositionalConfig positional;

  /// The window of self-attention block `index` (from 0) of a stack: 0 in the
  /// blocks nope_every leaves without positions, which keep full attention.
  int64_t window_of_block(int64_t index) const { return positional.nope_block(index) ? 0 : attention_window; }

  /// Whether the attention of block `index` (from 0) of a self-attention stack
  /// takes log_length_scale, logn_from and temperature_from: every block's, or with
  /// length_scaling_in nope_blocks only those nope_every leaves without positions.
  bool length_scaling_in_block(int64_t index) const {
    return length_scaling_in == LengthScalingIn::EveryBlock || positional.nope_block(index);
  }
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
  /// Step from which the final evaluation scores the mean of the weights at
  /// every checkpoint step instead of the last weights; 0: off.
  int64_t average_from = 0;
  int64_t log_every = 100;
  int64_t seed = 0;
  Device device = Device::Auto;
  /// Intra-op threads; 1 is fastest for the small models on 2 cores (docs/benchmarks.md).
  int64_t threads = 1;
  Precision precision = Precision::Float32;
  /// train/cuda_graphs.h.
  CudaGraphs cuda_graphs = CudaGraphs::Auto;
  /// LibTorch's deterministic kernels (train/deterministic.h).
  bool deterministic = false;
  std::string out_dir = "runs/ordering";
  /// A checkpoint whose weights the run starts from ("": none); the model's
  /// parameters it lacks keep their initialization (train/checkpoint.h).
  std::string init_from;
  /// What the optimizer updates; the rest stays as init_from has it.
  Trainable trainable = Trainable::All;
  /// Several processes on one run (train/data_parallel.h; how many comes from
  /// the launcher, not the config).
  CollectiveBackend backend = CollectiveBackend::Auto;
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
  /// Keep the first this many examples scored wrong at each length (prompt,
  /// reference, decoded answer, where it first goes wrong) in the results; 0: none.
  int64_t wrong_answers = 0;
};

struct Config {
  ModelConfig model;
  TaskConfig task;
  TrainConfig train;
  EvalConfig eval;
};

/// One object of a config file ("train", "model.positional", ...) and its
/// declared keys, for `posenc list` and docs/configs.md.
struct ConfigBlock {
  std::string path;
  std::string doc;
  std::vector<OptionSpec> keys;
  /// What a key shows as its default where the struct's is not the whole story ("per task").
  std::map<std::string, std::string> shown_defaults;
};
const std::vector<ConfigBlock>& config_blocks();
/// The block of config_blocks() at `path` ("task", "model.positional"); std::logic_error if none is declared.
const ConfigBlock& config_block(const std::string& path);
/// The declaration of the dotted config key `path` ("train.threads", "eval.lengths"); std::logic_error if none.
const OptionSpec& config_key(const std::string& path);

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
