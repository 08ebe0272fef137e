// Strict config parsing: every key known, every value typed and bounded.
//
// Each block of a config file has one table of declared keys (name, type,
// default, bounds or choices, doc), bound to the field that holds the value.
// The table drives reading, config_to_json, `posenc list` and docs/configs.md;
// what is left in code here are the rules between keys.
#include "posenc/config.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <unistd.h>

#include "posenc/positional/registry.h"
#include "posenc/tasks/registry.h"
#include "posenc/util/io.h"
#include "posenc/util/text.h"

namespace posenc {
namespace {

constexpr int64_t kBig = int64_t{1} << 40;

/// One declared key of a block, bound to the field of `S` that holds it.
template <class S>
struct Key {
  OptionSpec spec;  ///< default_value: the field's in a default-constructed S
  /// Stores a value checked against `spec`; null: the block's reader reads this key itself.
  std::function<void(S&, const json&)> set;
  /// The field as JSON; null result: not written (a key that only some configs have).
  std::function<json(const S&)> get;
};

template <class S, class T>
Key<S> field_key(OptionSpec spec, T S::*field) {
  spec.default_value = S{}.*field;
  return {std::move(spec), [field](S& s, const json& v) { s.*field = v.get<T>(); },
          [field](const S& s) { return json(s.*field); }};
}

template <class S>
Key<S> int_key(const char* name, int64_t S::*field, int64_t min, int64_t max, const char* doc) {
  return field_key(OptionSpec{name, OptionKind::Int, nullptr, doc, double(min), double(max)}, field);
}

template <class S>
Key<S> float_key(const char* name, double S::*field, double min, double max, const char* doc) {
  return field_key(OptionSpec{name, OptionKind::Float, nullptr, doc, min, max}, field);
}

template <class S>
Key<S> bool_key(const char* name, bool S::*field, const char* doc) {
  return field_key(OptionSpec{name, OptionKind::Bool, nullptr, doc}, field);
}

template <class S>
Key<S> path_key(const char* name, std::string S::*field, const char* doc) {
  return field_key(OptionSpec{name, OptionKind::Path, nullptr, doc}, field);
}

template <class S>
Key<S> string_key(const char* name, std::string S::*field, const char* doc) {
  return field_key(OptionSpec{name, OptionKind::String, nullptr, doc}, field);
}

/// A key whose value is one of the names of the enum E (choices.h).
template <class S, class E>
Key<S> choice_key(const char* name, E S::*field, const char* doc) {
  OptionSpec spec{name, OptionKind::String, nullptr, doc};
  for (const auto& c : choices<E>()) {
    spec.choices.push_back(c.name);
    spec.choice_docs.push_back(c.doc);
  }
  return field_key(std::move(spec), field);
}

template <class S>
Key<S> int_list_key(const char* name, std::vector<int64_t> S::*field, int64_t min, int64_t max, size_t max_items,
                    const char* doc) {
  OptionSpec spec{name, OptionKind::IntList, nullptr, doc, double(min), double(max)};
  spec.max_items = max_items;
  return field_key(std::move(spec), field);
}

/// A key the block's reader and writer handle themselves (a scheme slot), declared for its docs.
template <class S>
Key<S> custom_key(const char* name, OptionKind kind, json default_value, const char* doc) {
  return {OptionSpec{name, kind, std::move(default_value), doc}, nullptr, nullptr};
}

/// `key`, written only where `when` holds.
template <class S>
Key<S> written_if(Key<S> key, std::function<bool(const S&)> when) {
  auto get = key.get;
  key.get = [get, when](const S& s) { return when(s) ? get(s) : json(); };
  return key;
}

/// `key`, which a trained model may be read with changed (OptionSpec::set_on_trained).
template <class S>
Key<S> set_on_trained(Key<S> key) {
  key.spec.set_on_trained = true;
  return key;
}

/// `keys`, each of which a trained model may be read with changed (a block that is all evaluation).
template <class S>
std::vector<Key<S>> each_set_on_trained(std::vector<Key<S>> keys) {
  for (auto& key : keys) key.spec.set_on_trained = true;
  return keys;
}

/// `key`, with what another value of it means for an existing run (OptionSpec::run_part).
template <class S>
Key<S> run_part(RunPart part, Key<S> key) {
  key.spec.run_part = part;
  return key;
}

/// `keys`, each with `part` (a block of which every key is the same part of a run).
template <class S>
std::vector<Key<S>> with_run_part(RunPart part, std::vector<Key<S>> keys) {
  for (auto& key : keys) key.spec.run_part = part;
  return keys;
}

// ---- The key tables, one per block ----

const std::vector<Key<ModelConfig>>& model_keys() {
  static const std::vector<Key<ModelConfig>> keys = {
      choice_key("kind", &ModelConfig::kind, "the model; one of the kinds the task trains (posenc list)"),
      int_key("d_model", &ModelConfig::d_model, 1, 65536, "width of the residual stream"),
      int_key("heads", &ModelConfig::heads, 1, 1024, "attention heads; must divide d_model"),
      int_key("layers", &ModelConfig::layers, 1, 1024,
              "pre-LN blocks (of the encoder, or of the decoder for kind decoder)"),
      written_if<ModelConfig>(int_key("decoder_layers", &ModelConfig::decoder_layers, 0, 1024,
                                      "encoder_decoder only: the decoder's blocks (0: as many as layers)"),
                              [](const ModelConfig& m) { return m.kind == ModelKind::EncoderDecoder; }),
      int_key("d_ff", &ModelConfig::d_ff, 1, 1 << 20, "width of the GELU feed-forward"),
      float_key("dropout", &ModelConfig::dropout, 0.0, 0.99,
                "dropout on embeddings, attention probabilities and residual branches"),
      choice_key("pooling", &ModelConfig::pooling,
                 "the encoder's classifier; a decoder pools nothing and refuses any value but the default"),
      choice_key("token_embedding", &ModelConfig::token_embedding,
                 "how tokens enter the model; numeric needs an encoder, an even d_model and qkv projected, and "
                 "embeds a value v as sin(v w_k), cos(v w_k) with w_k = (2V)^(-k/(K-1)), K = d_model / 2, through a "
                 "learned d_model x d_model projection (padding and CLS keep a row each)"),
  };
  return keys;
}

const std::vector<Key<ModelConfig>>& attention_keys() {
  static const std::vector<Key<ModelConfig>> keys = {
      choice_key("qkv", &ModelConfig::qkv, "where attention's queries, keys and values come from"),
      choice_key("weights", &ModelConfig::attention_weights,
                 "how a query's logits (every scheme's terms and biases, every factor below) become its weights on "
                 "the values"),
      float_key("log_length_scale", &ModelConfig::log_length_scale, 0.0, 100.0,
                "0: the plain softmax; s > 0: Scalable-Softmax (Nakanishi 2025): every attention's (or those "
                "length_scaling_in names) logits of a query that sees n keys (after the causal mask and padding) are "
                "multiplied by s_h log n, s_h "
                "learned per head and layer from s (the paper's figure uses 0.43), so that attention does not "
                "flatten as sequences grow; a query that sees one key is unchanged"),
      set_on_trained(int_key(
          "logn_from", &ModelConfig::logn_from, 0, int64_t{1} << 30,
          "0: off; N >= 2: LogN scaling (Chiang & Cholak 2022; Qwen's logn attention): in every attention (or "
          "those length_scaling_in names) the logits of a query that sees n > N keys (after the causal mask and "
          "padding) are multiplied by log n / log N, and those "
          "of queries that see N or fewer are left as trained. N is the most keys a query saw in training: a "
          "decoder's longest training row less its last token, an encoder's task.max_length (plus one with CLS "
          "pooling)")),
      written_if<ModelConfig>(
          set_on_trained(int_key(
              "temperature_from", &ModelConfig::temperature_from, 0, int64_t{1} << 24,
              "0: off; F >= 1: Llama 4's attention temperature (its NoPE layers' attn_temperature_tuning, with "
              "floor_scale F): the logits of a query that sees n keys (after the causal mask and padding) are "
              "multiplied by 1 + temperature_beta log(floor(n / F) + 1), exactly 1 below F keys and growing in steps "
              "of F. Llama 4 takes F = 8192, its training context, and places it with length_scaling_in "
              "nope_blocks")),
          [](const ModelConfig& m) { return m.temperature_from != 0; }),
      written_if<ModelConfig>(set_on_trained(float_key("temperature_beta", &ModelConfig::temperature_beta, 1e-6, 100.0,
                                                       "the beta of temperature_from (Llama 4: 0.1)")),
                              [](const ModelConfig& m) { return m.temperature_from != 0; }),
      written_if<ModelConfig>(
          set_on_trained(choice_key(
              "length_scaling_in", &ModelConfig::length_scaling_in,
              "where log_length_scale, logn_from and temperature_from act, the factors that grow with the keys a "
              "query sees; nope_blocks puts them only where no scheme marks positions, as Llama 4 tunes the "
              "temperature of its NoPE layers only. With log_length_scale it decides which blocks learn an s_h")),
          [](const ModelConfig& m) { return m.length_scaling_in != LengthScalingIn::EveryBlock; }),
      bool_key("head_scale", &ModelConfig::head_scale,
               "head-based attention scale (Wang et al. 2024): every attention's logits of head h are multiplied "
               "by lambda_h, learned per head and layer and 1 at the start, so the model is unchanged until they "
               "train. Meant to be tuned alone on longer examples after training: train.init_from the trained "
               "checkpoint with train.trainable head_scale"),
      set_on_trained(
          float_key("logit_scale", &ModelConfig::logit_scale, 0.01, 100.0,
                    "every attention's logits are multiplied by this one fixed number, for every head and length (a "
                    "softmax temperature of 1/t; Wang et al. 2024 search one on longer examples); with "
                    "model.attention.head_scale the learned lambda_h multiply it, so tuning starts from it. 1: the "
                    "plain logits")),
      written_if<ModelConfig>(
          set_on_trained(int_key(
              "window", &ModelConfig::attention_window, 0, int64_t{1} << 30,
              "0: every key; W >= 1: sliding-window attention, each query of a self-attention block sees only "
              "the keys fewer than W tokens away (a decoder's: itself and the W - 1 before it; an encoder's: W - "
              "1 either side), counted in tokens, not position ids. Every block is windowed but those that "
              "model.positional.nope_every leaves without positions, which keep full attention (local RoPE "
              "blocks and global NoPE ones, as in Yang et al. 2025 and Cohere's Command A)")),
          [](const ModelConfig& m) { return m.attention_window != 0; }),
      written_if<ModelConfig>(
          bool_key("qk_norm", &ModelConfig::qk_norm,
                   "QK-norm: in every attention (self and cross), each head's query and key are RMS-normalized over "
                   "the head's channels and multiplied by a learned gain per channel (one for queries, one for keys, "
                   "shared by the heads, 1 at the start), before any scheme rotates them or reads them: Gemma 3's and "
                   "Qwen3's QK-norm (Henry et al. 2020 and Dehghani et al. 2023 before them; qk_norm_over width "
                   "normalizes the whole width before the heads split, as OLMo 2 does). Per head, a logit is then at "
                   "most sqrt(head dim) times the largest product of a channel's two gains, whatever the length "
                   "and the scale of q and k (model.attention.logit_scale multiplies it, as a fixed temperature)"),
          [](const ModelConfig& m) { return m.qk_norm; }),
      written_if<ModelConfig>(
          choice_key("qk_norm_over", &ModelConfig::qk_norm_over, "what qk_norm normalizes; needs qk_norm"),
          [](const ModelConfig& m) { return m.qk_norm_over != QkNormOver::Head; }),
  };
  return keys;
}

const std::vector<Key<PositionalConfig>>& positional_keys() {
  static const std::vector<Key<PositionalConfig>> keys = {
      string_key("type", &PositionalConfig::type,
                 "the positional scheme (posenc list); its own options go beside type in this block"),
      choice_key("apply_to", &PositionalConfig::apply_to, "where the scheme acts"),
      bool_key("share_across_layers", &PositionalConfig::share_across_layers,
               "one scheme module for all layers (true) or one per layer"),
      custom_key<PositionalConfig>(
          "cross", OptionKind::Scheme, "none",
          "encoder_decoder only: the scheme of the decoder's cross-attention, as a name or {\"type\": name, its "
          "options} (queries at target positions, keys at source positions, nothing masked); a scheme that only "
          "adds to the residual stream is refused there"),
      custom_key<PositionalConfig>(
          "input", OptionKind::Scheme, "none",
          "encoder or decoder: a second scheme before block 1 that adds positions to the residual stream (learned, "
          "sinusoidal, ...), as a name or {\"type\": name, its options}, beside type acting in attention (rope, "
          "fire, alibi, kerple, none, ...); McLeish et al.'s Abacus + FIRE is input learned with task.positions "
          "abacus and type fire. Where the task defines position ids, this scheme reads them"),
      custom_key<PositionalConfig>(
          "with", OptionKind::Scheme, "none",
          "a second scheme in the same attention as type, as a name or {\"type\": name, its options}: its bias, "
          "score terms and value terms add to type's, a rotation of q and k comes before the other's score terms "
          "read them, and it acts in the blocks type acts in. Yang et al.'s PaTH-FoX is type path with fox; "
          "refused where both rotate, both reweight the scores, or either adds to the residual stream (that is "
          "model.positional.input)"),
      written_if<PositionalConfig>(
          choice_key("task_ids", &PositionalConfig::task_ids,
                     "with an input scheme and a task that defines position ids (task.positions): which slots read "
                     "them; refused otherwise"),
          [](const PositionalConfig& p) { return p.input != "none" && p.task_ids != TaskIds::Input; }),
      written_if<PositionalConfig>(
          int_key("nope_every", &PositionalConfig::nope_every, 0, 1024,
                  "0: type acts in every block; N >= 2: blocks N, 2N, ... of each self-attention stack have no "
                  "scheme in their attention (NoPE blocks between positional ones: Llama 4's iRoPE is rope with "
                  "N = 4, Yang et al. 2025's RNoPE interleaves them too); for a scheme that acts in every block's "
                  "attention. With model.attention.window these blocks keep full attention"),
          [](const PositionalConfig& p) { return p.nope_every != 0; }),
  };
  return keys;
}

const std::vector<Key<PositionalConfig>>& randomize_keys() {
  static const std::vector<Key<PositionalConfig>> keys = {
      int_key("max_position", &PositionalConfig::randomize_max_position, 2, int64_t{1} << 30,
              "for every scheme: each training batch takes a sorted random subset of [0, max_position) as its "
              "position ids, a pure function of seed and step; evaluation keeps 0..L-1. A learned table must hold "
              "max_position rows"),
  };
  return keys;
}

const std::vector<Key<TaskConfig>>& task_keys() {
  static const std::vector<Key<TaskConfig>> keys = {
      string_key("type", &TaskConfig::type,
                 "the task (posenc list); its own options go beside type in this block (name: its old spelling)"),
      int_key("min_length", &TaskConfig::min_length, 2, 1 << 20,
              "shortest training length, in the task's unit (tokens; digits of an operand for addition and "
              "multiplication)"),
      int_key("max_length", &TaskConfig::max_length, 2, 1 << 20,
              "longest training length; lengths are drawn uniformly per batch"),
  };
  return keys;
}

const std::vector<Key<TrainConfig>>& train_keys() {
  static const std::vector<Key<TrainConfig>> keys = {
      // 0 would score an untrained model; more steps extend a run (--resume).
      run_part(RunPart::Resumable, int_key("steps", &TrainConfig::steps, 1, kBig, "optimizer steps")),
      int_key("batch_size", &TrainConfig::batch_size, 2, 1 << 20,
              "examples per step (shared among the ranks of one run)"),
      float_key("lr", &TrainConfig::lr, 0.0, 10.0, "AdamW's peak learning rate"),
      float_key("weight_decay", &TrainConfig::weight_decay, 0.0, 10.0,
                "AdamW's decoupled weight decay (not on biases and LayerNorm)"),
      int_key("warmup_steps", &TrainConfig::warmup_steps, 0, kBig, "linear warmup from 0 to lr"),
      float_key("min_lr_ratio", &TrainConfig::min_lr_ratio, 0.0, 1.0,
                "the cosine decay after warmup ends at lr x this (1: constant)"),
      float_key("grad_clip", &TrainConfig::grad_clip, 0.0, 1e9, "global gradient-norm clip (0: off)"),
      int_key("eval_every", &TrainConfig::eval_every, 1, kBig, "steps between in-distribution validations"),
      int_key("val_samples", &TrainConfig::val_samples, 2, 1 << 24,
              "examples of the fixed validation set, over the training lengths"),
      int_key("checkpoint_every", &TrainConfig::checkpoint_every, 1, kBig, "steps between checkpoints"),
      written_if<TrainConfig>(
          int_key("average_from", &TrainConfig::average_from, 0, kBig,
                  "from this step on, the weights at every checkpoint step (and the last) are averaged, uniformly, "
                  "and the final evaluation scores that mean instead of the last weights (stochastic weight "
                  "averaging, Izmailov et al. 2018); the mean is kept in average.pt, which posenc eval reads like "
                  "a checkpoint. 0: off"),
          [](const TrainConfig& t) { return t.average_from > 0; }),
      run_part(RunPart::Where, int_key("log_every", &TrainConfig::log_every, 1, kBig, "steps between log lines")),
      int_key("seed", &TrainConfig::seed, 0, kBig, "weights, dropout and training batches"),
      run_part(RunPart::Where, choice_key("device", &TrainConfig::device, "where the run trains")),
      run_part(
          RunPart::Where,
          int_key("threads", &TrainConfig::threads, 1, 1024,
                  "intra-op threads: 1 is fastest for small models on a few cores; run runs side by side instead")),
      choice_key("precision", &TrainConfig::precision, "the forward pass's float type"),
      run_part(RunPart::Resumable,
               choice_key(
                   "cuda_graphs", &TrainConfig::cuda_graphs,
                   "capture the training step (forward, backward, clipping, AdamW) as a CUDA graph per batch shape "
                   "and replay it; graphed and eager steps agree to float tolerance and a run resumes across the two")),
      written_if<TrainConfig>(
          bool_key("deterministic", &TrainConfig::deterministic,
                   "LibTorch's deterministic kernels for the run (and CUBLAS_WORKSPACE_CONFIG=:4096:8 unless "
                   "set), where CUDA's kernels otherwise add with atomics in no fixed order; an operation with no "
                   "such kernel stops the run with an error that names it, and it can be slower. With it, two "
                   "CUDA runs of one config ended equal bit for bit for every scheme on an H200, also with other "
                   "trainings on the GPU (docs/platforms.md); other GPUs are untested. On the CPU training is "
                   "deterministic already"),
          [](const TrainConfig& t) { return t.deterministic; }),
      run_part(RunPart::Where,
               string_key("out_dir", &TrainConfig::out_dir,
                          "the run directory (--out overrides it; a relative path is taken from the working "
                          "directory); a moved run resumes")),
      written_if<TrainConfig>(
          path_key("init_from", &TrainConfig::init_from,
                   "a checkpoint (checkpoint.pt or average.pt) whose weights the run starts from instead of "
                   "train.seed's: every parameter it holds must be one of this model's, of the same shape; the "
                   "model's parameters it lacks (model.attention.head_scale's, say) keep their initialization. "
                   "The optimizer, step and schedule start afresh; --resume continues from the run's own "
                   "checkpoint instead. Not given: none"),
          [](const TrainConfig& t) { return !t.init_from.empty(); }),
      written_if<TrainConfig>(
          choice_key("trainable", &TrainConfig::trainable, "which parameters the optimizer updates"),
          [](const TrainConfig& t) { return t.trainable != Trainable::All; }),
      // How many processes train a run, and how they talk, are not what it is.
      run_part(RunPart::Resumable, choice_key("backend", &TrainConfig::backend,
                                              "one run on several processes (posenc train --nproc, torchrun, srun; "
                                              "docs/cluster.md): the collective library")),
      run_part(RunPart::Resumable, float_key("bucket_mb", &TrainConfig::bucket_mb, 0.001, 4096.0,
                                             "gradients are all-reduced in flat buffers of at most this many MiB")),
      run_part(RunPart::Resumable,
               int_key("collective_timeout_s", &TrainConfig::collective_timeout_s, 1, 86400,
                       "how long a rank waits for the others (rendezvous, each collective) before it fails")),
  };
  return keys;
}

const std::vector<Key<EvalConfig>>& eval_keys() {
  static const std::vector<Key<EvalConfig>> keys = each_set_on_trained(with_run_part<EvalConfig>(
      RunPart::Resumable,
      {
          int_list_key("lengths", &EvalConfig::lengths, 2, 1 << 20, 256,
                       "evaluation lengths, past training for extrapolation"),
          int_key("samples_per_length", &EvalConfig::samples_per_length, 2, 1 << 24,
                  "examples of each length's fixed evaluation set"),
          int_key(
              "seed", &EvalConfig::seed, 0, kBig,
              "seed of the evaluation sets, independent of train.seed: every scheme and seed sees the same examples"),
          int_key("max_batch_tokens", &EvalConfig::max_batch_tokens, 1, kBig,
                  "tokens per evaluation batch (batch size = max(1, tokens / length))"),
          bool_key("oracle_length", &EvalConfig::oracle_length,
                   "tasks whose answers end with an end token (scan, translation): also decode with the end token held "
                   "back until the reference's length (Newman et al. 2020), reported as oracle_length per length in "
                   "results.json: it tells a model that stops too early from one whose tokens are wrong; refused for "
                   "other tasks"),
          written_if<EvalConfig>(
              int_list_key(
                  "operand_grid", &EvalConfig::operand_grid, 1, 1 << 16, 32,
                  "a task of two operands (addition, multiplication): exact match for every pair (digits of a, "
                  "digits of b) "
                  "of these lengths, eval.samples_per_length examples each, as McLeish et al. plot it; "
                  "posenc eval CHECKPOINT --set eval.operand_grid=[...] adds it to a trained run"),
              [](const EvalConfig& e) { return !e.operand_grid.empty(); }),
          written_if<EvalConfig>(
              int_key(
                  "wrong_answers", &EvalConfig::wrong_answers, 0, 100000,
                  "keep the first this many examples scored wrong at each length in results.json (wrong_answers): "
                  "a decoder's prompt, reference, decoded answer and first wrong token, with the model's five "
                  "likeliest tokens there and the reference's probability, a classifier's input, label "
                  "and prediction, written as the task writes tokens (addition's digits, SCAN's words); posenc eval "
                  "CHECKPOINT --set eval.wrong_answers=20 adds them to a trained run; refused for perplexity"),
              [](const EvalConfig& e) { return e.wrong_answers > 0; }),
      }));  // evaluation settings: a run resumes to evaluate again, a trained model is read with others
  return keys;
}

// ---- Reading and writing a block through its table ----

std::string child_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

/// The object `j` at `path` (a ConfigError if it is not one).
const json& as_object(const json& j, const std::string& path) {
  if (!j.is_object())
    throw ConfigError((path.empty() ? std::string("config") : path) + ": expected an object, got " + json_type_name(j));
  return j;
}

/// Reads the declared keys of the object `j` at `path` into `out`. Keys whose
/// `set` is null, and the `nested` blocks, are the caller's to read. Any other
/// key goes into `rest` (a scheme's or a task's options) where it is given,
/// and is an error naming the known keys where it is not.
template <class S>
void read_keys(const json& j, const std::string& path, const std::vector<Key<S>>& keys, S& out,
               const std::vector<std::string>& nested = {}, json* rest = nullptr) {
  for (auto it = as_object(j, path).begin(); it != j.end(); ++it) {
    const auto key = std::find_if(keys.begin(), keys.end(), [&](const Key<S>& k) { return k.spec.name == it.key(); });
    if (key != keys.end()) {
      if (key->set) key->set(out, checked_value(key->spec, it.value(), child_path(path, it.key())));
      continue;
    }
    if (std::find(nested.begin(), nested.end(), it.key()) != nested.end()) continue;
    if (rest) {
      (*rest)[it.key()] = it.value();
      continue;
    }
    std::vector<std::string> known;
    for (const auto& k : keys) known.push_back(k.spec.name);
    known.insert(known.end(), nested.begin(), nested.end());
    throw ConfigError(child_path(path, it.key()) + ": unknown key (known here: " + join(known, ", ") + ")");
  }
}

template <class S>
void write_keys(const S& s, const std::vector<Key<S>>& keys, json& out) {
  for (const auto& k : keys) {
    if (!k.get) continue;
    json v = k.get(s);
    if (!v.is_null()) out[k.spec.name] = std::move(v);
  }
}

template <class S>
std::vector<OptionSpec> specs_of(const std::vector<Key<S>>& keys) {
  std::vector<OptionSpec> out;
  for (const auto& k : keys) out.push_back(k.spec);
  return out;
}

}  // namespace

const std::vector<ConfigBlock>& config_blocks() {
  static const std::vector<ConfigBlock> blocks = {
      {"model", "The transformer: its kind and size", specs_of(model_keys()), {}},
      {"model.attention", "Where attention's inputs come from", specs_of(attention_keys()), {}},
      {"model.positional",
       "The positional scheme, with its own options beside type (listed at the end of this page)",
       specs_of(positional_keys()),
       {}},
      {"model.positional.randomize",
       "Randomized positions (Ruoss et al. 2023); the block is left out when they are off",
       specs_of(randomize_keys()),
       {{"max_position", "off"}}},
      {"task",
       "The task, with its own options beside type (listed below)",
       specs_of(task_keys()),
       {{"min_length", "per task"}, {"max_length", "per task"}}},
      {"train", "Optimization, the run directory, the device and the processes of one run", specs_of(train_keys()), {}},
      {"eval",
       "The fixed evaluation sets, scored after training and by `posenc eval`",
       specs_of(eval_keys()),
       {{"lengths", "per task"}, {"operand_grid", "none"}}},
  };
  return blocks;
}

const ConfigBlock& config_block(const std::string& path) {
  for (const ConfigBlock& block : config_blocks())
    if (block.path == path) return block;
  throw std::logic_error("no config block " + path + " declared");
}

const OptionSpec& config_key(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot != std::string::npos)
    if (const OptionSpec* key = find_option(config_block(path.substr(0, dot)).keys, path.substr(dot + 1))) return *key;
  throw std::logic_error("no config key " + path + " declared");
}

namespace {

/// model.positional.cross, .input and .with: a scheme name, or {"type": name, its
/// options...}, resolved against the scheme's registry entry into `name` and
/// `options`. Cross-attention's queries (target) and keys (source) are never
/// masked, so its options are resolved as for an encoder. `task_ids`: the slot
/// is handed the ids a task defines, so a scheme that reads them is not causal.
void parse_scheme_slot(const json& j, const std::string& path, bool causal, std::string& name, json& options,
                       bool task_ids = false) {
  json user = json::object();
  if (j.is_string()) {
    name = j.get<std::string>();
  } else if (j.is_object()) {
    if (!j.contains("type") || !j["type"].is_string())
      throw ConfigError(path + ": needs \"type\", a scheme name (posenc list)");
    name = j["type"].get<std::string>();
    for (const auto& [key, value] : j.items())
      if (key != "type") user[key] = value;
  } else {
    throw ConfigError(path + ": expected a scheme name or an object {\"type\": name, ...}, got " + shown_value(j));
  }
  const SchemeInfo& info = [&]() -> const SchemeInfo& {
    try {
      return find_scheme(name);
    } catch (const ConfigError& e) {
      throw ConfigError(path + ": " + e.what());
    }
  }();
  options = resolve_scheme_options(info, user, path, causal && !(task_ids && info.reads_task_positions)).json();
}

/// A scheme slot as config_to_json writes it: {"type": name, its options}.
json scheme_slot_json(const std::string& name, const json& options) {
  json out = options;
  out["type"] = name;
  return out;
}

/// model.positional.input beside model.positional.type: the input slot holds a
/// scheme that adds to the residual stream, `type` one that acts in attention.
void check_scheme_pair(const PositionalConfig& p, const std::string& path) {
  if (p.input == "none") return;
  const SchemeInfo& input = find_scheme(p.input);
  const SchemeInfo& attention = find_scheme(p.type);
  if (input.default_placement != Placement::Input)
    throw ConfigError(path + ".input=" + p.input +
                      " acts in attention, but the input slot holds a scheme that adds "
                      "positions to the residual stream before block 1 (learned, sinusoidal, ...); put " +
                      p.input + " in " + path + ".type instead");
  if (attention.default_placement == Placement::Input && attention.name != "none")
    throw ConfigError(path + ".input=" + p.input + " with " + path + ".type=" + p.type +
                      ": both would add positions to the residual stream; pair an input scheme with one that acts "
                      "in attention (rope, alibi, fire, kerple, none, ...)");
}

/// model.positional.with beside model.positional.type: two schemes that act in
/// attention, and not the same one twice. Which hooks may pair is decided when
/// the model is built (pair_schemes), where the instances say which they use.
void check_with_scheme(const PositionalConfig& p, const std::string& path) {
  if (p.with == "none") return;
  const std::string at = child_path(path, "with");
  const SchemeInfo& with = find_scheme(p.with);
  if (p.type == "none")
    throw ConfigError(at + "=" + p.with + ": " + path + ".type is none, so there is no scheme to pair it with; put " +
                      p.with + " in " + path + ".type instead");
  if (with.default_placement == Placement::Input)
    throw ConfigError(at + "=" + p.with + " adds positions to the residual stream; with pairs a second scheme " +
                      "in attention, and " + path + ".input holds one that adds to the residual stream");
  if (find_scheme(p.type).default_placement == Placement::Input)
    throw ConfigError(at + "=" + p.with + " with " + path + ".type=" + p.type + ": " + p.type +
                      " adds positions to the residual stream, and with pairs two schemes in attention; put " + p.type +
                      " in " + path + ".input and " + p.with + " in " + path + ".type");
  if (p.with == p.type)
    throw ConfigError(at + "=" + p.with + ": the same scheme as " + path +
                      ".type; one instance already holds every head's parameters");
}

/// nope_every leaves blocks without a scheme that acts in every block's attention.
void check_nope_blocks(const PositionalConfig& p, const SchemeInfo& info, const std::string& path) {
  if (p.nope_every == 0) return;
  const std::string at = child_path(path, "nope_every");
  if (p.nope_every == 1)
    throw ConfigError(at + ": 1 would leave every block without positions; for that give " + path +
                      ".type none, or 0 to keep the scheme in every block");
  if (p.type == "none")
    throw ConfigError(at + ": " + path + ".type is none, so no block has positions to leave out; give 0");
  const bool at_input =
      p.apply_to == ApplyTo::Input || (p.apply_to == ApplyTo::Auto && info.default_placement == Placement::Input);
  if (at_input)
    throw ConfigError(at + ": " + path + ".type=" + p.type +
                      " acts once, before block 1 (or in block 1's attention), so no later block has it to leave "
                      "out; nope_every is for a scheme in every block's attention (rope, alibi, fire, ...)");
}

/// `causal`: a decoder, where options with a causal value (t5's bidirectional)
/// take it. Not where the scheme in `type` reads ids a task defines
/// (`task_ids`, with no input slot or with task_ids "both"): ids are not in token order, and a key earlier
/// in the sequence may hold a larger id than its query.
PositionalConfig parse_positional(const json& j, const std::string& path, bool causal, bool task_ids) {
  PositionalConfig p;
  json user = json::object();  // the scheme's own options
  read_keys(j, path, positional_keys(), p, {"randomize"}, &user);
  const SchemeInfo& info = [&]() -> const SchemeInfo& {
    try {
      return find_scheme(p.type);
    } catch (const ConfigError& e) {
      throw ConfigError(child_path(path, "type") + ": " + e.what());
    }
  }();
  if (j.contains("randomize")) {
    const std::string at = child_path(path, "randomize");
    if (!as_object(j["randomize"], at).contains("max_position"))
      throw ConfigError(at + ": needs max_position (training positions are drawn from [0, max_position))");
    read_keys(j["randomize"], at, randomize_keys(), p);
  }
  if (j.contains("cross"))
    parse_scheme_slot(j["cross"], child_path(path, "cross"), /*causal=*/false, p.cross, p.cross_options);
  if (j.contains("input")) parse_scheme_slot(j["input"], child_path(path, "input"), causal, p.input, p.input_options);
  check_scheme_pair(p, path);
  check_nope_blocks(p, info, path);
  if (j.contains("task_ids")) {
    const std::string at = child_path(path, "task_ids");
    if (p.input == "none")
      throw ConfigError(at + ": says which of two slots reads a task's position ids, but " + path +
                        ".input is none, so " + path + ".type=" + p.type + " reads them alone; leave task_ids out");
    if (!task_ids)
      throw ConfigError(at + "=" + name_of(p.task_ids) +
                        ": the task defines no position ids (task.positions); leave task_ids out");
  }
  const bool type_reads_task_ids = task_ids && (p.input == "none" || p.task_ids == TaskIds::Both);
  p.options = resolve_scheme_options(info, user, path, causal && !type_reads_task_ids).json();
  if (j.contains("with")) {
    // In attention beside type: it reads the task's ids where type does and it can.
    parse_scheme_slot(j["with"], child_path(path, "with"), causal, p.with, p.with_options, type_reads_task_ids);
  }
  check_with_scheme(p, path);
  return p;
}

/// `task_ids`: the task defines each token's position id (TaskInfo::positions_end).
ModelConfig parse_model(const json& j, const std::string& path, bool task_ids) {
  ModelConfig m;
  read_keys(j, path, model_keys(), m, {"attention", "positional"});
  const std::string kind = name_of(m.kind);
  const auto at = [&](const char* key) { return child_path(path, key); };
  if (m.decoder_layers > 0 && m.kind != ModelKind::EncoderDecoder)
    throw ConfigError(at("decoder_layers") + ": only an encoder_decoder has a separate decoder (model.kind=" + kind +
                      " has model.layers blocks)");
  if (m.token_embedding == TokenEmbedding::Numeric && m.kind != ModelKind::Encoder)
    throw ConfigError(at("token_embedding") + ": \"numeric\" embeds an encoder's token values; model.kind=" + kind +
                      " predicts tokens through a head of one row per token: use \"table\"");
  if (m.token_embedding == TokenEmbedding::Numeric && m.d_model % 2 != 0)
    throw ConfigError(at("token_embedding") + ": \"numeric\" embeds each value as sin/cos pairs, so model.d_model " +
                      "must be even (it is " + std::to_string(m.d_model) + ")");
  // A decoder predicts a token at every position and pools nothing. Configs
  // that posenc wrote for decoders record the default ("max"), so that one passes.
  if (m.kind != ModelKind::Encoder && m.pooling != ModelConfig{}.pooling)
    throw ConfigError(at("pooling") + ": \"" + name_of(m.pooling) + "\" pools the tokens of an encoder; model.kind=" +
                      kind + " predicts a token at every target position and pools nothing: leave model.pooling out");
  if (j.contains("attention")) read_keys(j["attention"], at("attention"), attention_keys(), m);
  if (m.qkv == Qkv::Embedded && m.token_embedding == TokenEmbedding::Numeric)
    throw ConfigError(
        at("attention") +
        ".qkv: \"embedded\" reads block 1's q, k, v from rows of the token table, and "
        "model.token_embedding=numeric has no such table; use \"projected\" or token_embedding \"table\"");
  const bool causal = m.kind == ModelKind::Decoder;
  m.positional =
      parse_positional(j.contains("positional") ? j["positional"] : json::object(), at("positional"), causal, task_ids);
  if (m.qkv == Qkv::Embedded && m.positional.input != "none")
    throw ConfigError(at("positional") + ".input=" + m.positional.input +
                      " adds positions to the residual stream before block 1, but model.attention.qkv=embedded reads "
                      "block 1's q, k, v straight from the token table; use \"projected\" or leave input out");
  if (m.kind == ModelKind::EncoderDecoder) {
    if (m.decoder_layers == 0) m.decoder_layers = m.layers;
    if (m.qkv == Qkv::Embedded)
      throw ConfigError(at("attention") +
                        ".qkv: \"embedded\" reads block 1's q, k, v from the token table, which an encoder_decoder "
                        "shares between its encoder and decoder; use \"projected\"");
    if (m.positional.randomize_max_position > 0)
      throw ConfigError(at("positional") +
                        ".randomize: randomized positions are drawn for one sequence per example; an "
                        "encoder_decoder has two (source and target); leave randomize out");
    if (m.positional.input != "none")
      throw ConfigError(at("positional") +
                        ".input: a second scheme at the input is for an encoder or a decoder; an encoder_decoder "
                        "has two inputs (source and target): leave input out");
  } else if (m.positional.cross != "none") {
    throw ConfigError(at("positional") + ".cross: only an encoder_decoder has cross-attention (model.kind=" + kind +
                      ")");
  }
  if (m.attention_weights == AttentionWeights::StickBreaking && m.kind != ModelKind::Decoder)
    throw ConfigError(at("attention") +
                      ".weights: \"stick_breaking\" hands out a query's weight key by key going back from it, "
                      "which needs the causal order of a decoder's self-attention; model.kind=" +
                      kind + " has attention without it: use \"softmax\"");
  if (m.positional.nope_every > 0) {
    // Every self-attention stack has a block without positions.
    const bool decoder_short = m.kind == ModelKind::EncoderDecoder && m.positional.nope_every > m.decoder_layers;
    if (m.positional.nope_every > m.layers || decoder_short)
      throw ConfigError(at("positional") + ".nope_every=" + std::to_string(m.positional.nope_every) + ": the " +
                        (decoder_short ? "decoder has model.decoder_layers=" + std::to_string(m.decoder_layers)
                                       : "model has model.layers=" + std::to_string(m.layers)) +
                        " blocks, so none would be left without positions; give at most that many, or 0");
  }
  if (m.length_scaling_in == LengthScalingIn::NopeBlocks) {
    if (m.positional.nope_every == 0)
      throw ConfigError(at("attention") +
                        ".length_scaling_in: \"nope_blocks\" places the length factors in the blocks "
                        "model.positional.nope_every leaves without positions, but it is 0, so there are none; set "
                        "nope_every or use \"every_block\"");
    if (m.log_length_scale == 0 && m.logn_from == 0 && m.temperature_from == 0)
      throw ConfigError(at("attention") +
                        ".length_scaling_in: \"nope_blocks\" places log_length_scale, logn_from and temperature_from, "
                        "but all three are 0 (off), so it would change nothing; turn one on or leave "
                        "length_scaling_in out");
  }
  if (!m.qk_norm && m.qk_norm_over != QkNormOver::Head)
    throw ConfigError(at("attention") + ".qk_norm_over: \"" + name_of(m.qk_norm_over) +
                      "\" says what QK-norm normalizes, but qk_norm is false, so it would change nothing; set "
                      "qk_norm true too or leave qk_norm_over out");
  if (m.temperature_from == 0 && m.temperature_beta != ModelConfig{}.temperature_beta)
    throw ConfigError(at("attention") +
                      ".temperature_beta: it is the beta of temperature_from, which is 0 (off), so "
                      "it would change nothing; set temperature_from too or leave temperature_beta out");
  if (m.logn_from == 1)
    throw ConfigError(at("attention") +
                      ".logn_from: 1 would divide by log 1 = 0; give 0 (off) or the most keys a query saw in "
                      "training, at least 2");
  if (m.d_model % m.heads != 0)
    throw ConfigError(path + ".heads: " + std::to_string(m.heads) + " does not divide " + path + ".d_model " +
                      std::to_string(m.d_model));
  return m;
}

TaskConfig parse_task(const json& j, const std::string& path) {
  as_object(j, path);
  // "name" is what configs and checkpoints written before the task registry call it.
  if (j.contains("name") && j.contains("type"))
    throw ConfigError(child_path(path, "name") + ": give the task as " + child_path(path, "type") +
                      " only (name is its old spelling)");
  const std::string type_key = j.contains("name") ? "name" : "type";
  TaskConfig t;
  if (j.contains(type_key))  // task_keys() starts with type
    t.type = checked_value(task_keys().front().spec, j[type_key], child_path(path, type_key)).get<std::string>();
  const TaskInfo& info = [&]() -> const TaskInfo& {
    try {
      return find_task(t.type);
    } catch (const ConfigError& e) {
      throw ConfigError(child_path(path, type_key) + ": " + e.what());
    }
  }();
  // The task's lengths are its defaults until the config gives them.
  t.min_length = info.default_min_length;
  t.max_length = info.default_max_length;
  json user = json::object();  // the task's own options
  read_keys(j, path, task_keys(), t, {"name"}, &user);
  t.options =
      resolve_options(info.options, user, path, "task \"" + t.type + "\"", {"type", "min_length", "max_length"});
  if (t.min_length > t.max_length)
    throw ConfigError(path + ".min_length: " + std::to_string(t.min_length) + " is greater than " + path +
                      ".max_length " + std::to_string(t.max_length));
  return t;
}

TrainConfig parse_train(const json& j, const std::string& path) {
  TrainConfig t;
  read_keys(j, path, train_keys(), t);  // out_dir, a string, is never empty
  if (t.average_from > t.steps)
    throw ConfigError(path + ".average_from: " + std::to_string(t.average_from) + " is past " + path + ".steps " +
                      std::to_string(t.steps) + ", so no weights would be averaged");
  return t;
}

EvalConfig parse_eval(const json& j, const std::string& path) {
  EvalConfig e;
  read_keys(j, path, eval_keys(), e);
  return e;
}

}  // namespace

namespace {

/// The scheme in `key` reads the ids of `what`: it can, and a table of
/// positions among its `options` holds the largest id of training (with its
/// offsets) and of every evaluation length. `input_slot`: the scheme is the
/// input slot's (for the hint of where else an embedding scheme could go).
void check_scheme_reads_task_ids(const Config& c, const TaskInfo& task, const std::string& what, const std::string& key,
                                 const std::string& name, const json& options, bool input_slot) {
  const SchemeInfo& scheme = find_scheme(name);
  if (!scheme.reads_task_positions) {
    std::vector<std::string> can, embed;
    for (const auto& s : scheme_registry())
      if (s.reads_task_positions) {
        can.push_back(s.name);
        if (s.default_placement == Placement::Input && s.name != "none") embed.push_back(s.name);
      }
    const bool alone = !input_slot && c.model.positional.input == "none";
    throw ConfigError(
        key + "=" + scheme.name + " cannot read the position ids " + what +
        " defines; schemes that can: " + join(can, ", ") +
        (alone        ? " (or put " + join(embed, " or ") + " in model.positional.input, beside a scheme in attention)"
         : input_slot ? ""
                      : " (or leave model.positional.task_ids out: then only the input reads them)"));
  }
  const auto rows = options.find("max_positions");
  if (rows == options.end()) return;
  std::vector<int64_t> lengths = c.eval.lengths;
  lengths.push_back(c.task.max_length);
  lengths.insert(lengths.end(), c.eval.operand_grid.begin(), c.eval.operand_grid.end());
  const std::string table = input_slot ? "model.positional.input" : "model.positional";
  for (const int64_t length : lengths) {
    const int64_t end = task.positions_end(c.task, length);
    if (end > rows->get<int64_t>())
      throw ConfigError(table + ".max_positions=" + std::to_string(rows->get<int64_t>()) + ": " + what +
                        " gives length " + std::to_string(length) + " ids up to " + std::to_string(end - 1) +
                        "; the table needs at least " + std::to_string(end) + " rows");
  }
}

/// A task that defines its own position ids (TaskInfo::positions_end): what
/// the model must be to read them.
void check_task_positions(const Config& c, const TaskInfo& task) {
  if (!task.positions_end || task.positions_end(c.task, c.task.max_length) == 0) return;
  const std::string what = "task.positions=" + c.task.options.get_string("positions");
  if (c.model.kind != ModelKind::Decoder)
    throw ConfigError(what + ": task-defined positions are read by a decoder (model.kind=decoder), not model.kind=" +
                      name_of(c.model.kind));
  if (c.model.positional.randomize_max_position > 0)
    throw ConfigError("model.positional.randomize: " + what +
                      " gives every token its position already; leave randomize out");
  // The schemes that read them: the input slot's where there is one (then
  // model.positional.type acts in attention over 0..L-1, unless task_ids is
  // "both"), else the one scheme.
  const PositionalConfig& p = c.model.positional;
  if (p.reads_task_ids(/*input_slot=*/true))
    check_scheme_reads_task_ids(c, task, what, "model.positional.input", p.input, p.input_options, true);
  if (p.reads_task_ids(/*input_slot=*/false)) {
    check_scheme_reads_task_ids(c, task, what, "model.positional.type", p.type, p.options, false);
    // model.positional.with reads them too where it can (else it counts 0..L-1, as the causal mask does).
    if (p.with != "none" && find_scheme(p.with).reads_task_positions)
      check_scheme_reads_task_ids(c, task, what, "model.positional.with", p.with, p.with_options, false);
  }
}

}  // namespace

Config config_from_json(const json& j) {
  Config c;
  as_object(j, "");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "model" && it.key() != "task" && it.key() != "train" && it.key() != "eval")
      throw ConfigError(it.key() + ": unknown key (known here: model, task, train, eval)");
  const auto block = [&](const char* key) { return j.contains(key) ? j[key] : json::object(); };
  // The task first: whether it defines position ids decides how the model's
  // scheme options are read (parse_positional).
  c.task = parse_task(block("task"), "task");
  const TaskInfo& task = find_task(c.task.type);
  const bool task_ids = task.positions_end && task.positions_end(c.task, c.task.max_length) > 0;
  c.model = parse_model(block("model"), "model", task_ids);
  c.train = parse_train(block("train"), "train");
  c.eval = parse_eval(block("eval"), "eval");
  if (!(j.contains("eval") && j["eval"].contains("lengths"))) c.eval.lengths = task.default_eval_lengths;
  const auto& kinds = task.model_kinds;
  if (std::find(kinds.begin(), kinds.end(), c.model.kind) == kinds.end()) {
    std::vector<std::string> names;
    for (const ModelKind k : kinds) names.push_back(name_of(k));
    throw ConfigError("task.type=" + c.task.type + " trains " + join(names, " or ") +
                      " models, but model.kind=" + name_of(c.model.kind) + "; set model.kind=" + names.front() +
                      " or choose a task for a " + name_of(c.model.kind) + " (posenc list)");
  }
  if (!c.eval.operand_grid.empty() && !task.has_operands) {
    std::vector<std::string> with;
    for (const auto& t : task_registry())
      if (t.has_operands) with.push_back(t.name);
    throw ConfigError("eval.operand_grid: task.type=" + c.task.type +
                      " has no operands whose lengths could differ; tasks that do: " + join(with, ", "));
  }
  check_task_positions(c, task);
  if (c.train.trainable == Trainable::HeadScale) {
    if (!c.model.head_scale)
      throw ConfigError(
          "train.trainable=head_scale trains the per-head logit scales, but model.attention.head_scale is false; "
          "set model.attention.head_scale=true");
    if (c.train.init_from.empty())
      throw ConfigError(
          "train.trainable=head_scale trains only the per-head logit scales, which would leave the rest of the "
          "model at its random start; give train.init_from, the trained model's checkpoint");
  }
  return c;
}

json config_to_json(const Config& c) {
  const PositionalConfig& p = c.model.positional;
  json positional = p.options;  // the scheme's own options beside its declared keys
  write_keys(p, positional_keys(), positional);
  if (p.randomize_max_position > 0) write_keys(p, randomize_keys(), positional["randomize"]);
  if (c.model.kind == ModelKind::EncoderDecoder) positional["cross"] = scheme_slot_json(p.cross, p.cross_options);
  if (p.input != "none") positional["input"] = scheme_slot_json(p.input, p.input_options);
  if (p.with != "none") positional["with"] = scheme_slot_json(p.with, p.with_options);
  json model = json::object(), attention = json::object();
  write_keys(c.model, model_keys(), model);
  write_keys(c.model, attention_keys(), attention);
  model["attention"] = attention;
  model["positional"] = positional;
  json task = c.task.options.json();  // the task's own options beside its declared keys
  write_keys(c.task, task_keys(), task);
  json train = json::object(), eval = json::object();
  write_keys(c.train, train_keys(), train);
  write_keys(c.eval, eval_keys(), eval);
  return {{"model", model}, {"task", task}, {"train", train}, {"eval", eval}};
}

namespace {
// Bounds on what a config or grid file may be: far above any real one, far
// below what would exhaust memory (a 100,000-level nesting, /dev/zero).
constexpr int kMaxJsonDepth = 64;
constexpr std::uintmax_t kMaxJsonBytes = std::uintmax_t{16} << 20;
}  // namespace

json parse_json_strict(const std::string& text, const std::string& context) {
  // The callback sees every key as it is read: one set of keys per open object.
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> where;  // the object path, for the message
  std::string last_key;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth)
      throw ConfigError(context + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels; no posenc file needs more");
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        where.push_back(where.empty() ? "" : (where.back().empty() ? "" : where.back() + ".") + last_key);
        break;
      case json::parse_event_t::array_start: last_key += "[]"; break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        where.pop_back();
        break;
      case json::parse_event_t::key: {
        last_key = parsed.get<std::string>();
        if (!keys.empty() && !keys.back().insert(last_key).second)
          throw ConfigError(context + ": key \"" + last_key + "\" appears twice in " +
                            (where.back().empty() ? std::string("the top-level object") : "\"" + where.back() + "\"") +
                            " (only one value can hold)");
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text, check, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    throw ConfigError(context + ": invalid JSON: " + e.what());
  } catch (const json::out_of_range& e) {
    // e.g. 1e400: "number overflow parsing '1e400'"
    const std::string what = e.what();
    throw ConfigError(context + ": a number is out of range: " + what.substr(what.find(']') + 2) +
                      " (a JSON number must fit in a double)");
  } catch (const json::exception& e) {
    throw ConfigError(context + ": invalid JSON: " + e.what());
  }
}

json read_json_file(const std::string& path) {
  std::string text;
  try {
    text = read_file(path, kMaxJsonBytes);
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
  return parse_json_strict(text, path);
}

void set_json_path(json& j, const std::string& path, const json& value, const std::string& context) {
  if (j.is_null()) j = json::object();
  json* node = &j;
  std::string walked;
  size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw ConfigError(context + ": empty component in path '" + path + "'");
    if (!node->is_object())
      throw ConfigError(context + ": '" + walked + "' is " + shown_value(*node) + ", not a section with options");
    walked += (walked.empty() ? "" : ".") + key;
    if (dot == std::string::npos) {
      // A section (an object) is replaced only by another: `train=5` is a slip for train.steps=5.
      const bool section = node->contains(key) && (*node)[key].is_object();
      if (section && !value.is_object())
        throw ConfigError(context + ": '" + walked + "' is a section of the config; set one of its options (" + walked +
                          ".NAME=VALUE), or give a whole JSON object");
      (*node)[key] = value;
      return;
    }
    if (!node->contains(key) || (*node)[key].is_null()) (*node)[key] = json::object();
    node = &(*node)[key];
    start = dot + 1;
  }
}

void apply_override(json& j, const std::string& assignment) {
  // Errors quote the assignment; a long one (a pasted file) is cut, not echoed whole.
  const std::string shown = assignment.size() <= 160 ? assignment
                                                     : assignment.substr(0, 120) + "... (" +
                                                           std::to_string(assignment.size()) + " characters)";
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set " + shown + ": expected path=value, e.g. train.steps=2000");
  const std::string context = "--set " + shown;
  if (const std::string bad = utf8_problem(assignment); !bad.empty()) throw ConfigError("--set: " + bad);
  const std::string text = assignment.substr(eq + 1);
  bool is_json = true;
  try {
    const json probe = json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
    static_cast<void>(probe);
  } catch (const json::parse_error&) {
    is_json = false;  // bare words are strings: model.pooling=cls
  } catch (const json::exception&) {
    // valid syntax with a number out of range: parse_json_strict says so
  }
  // Duplicate keys and overflowing numbers are errors, as in a config file.
  const json value = is_json ? parse_json_strict(text, context) : json(text);
  const std::string path = assignment.substr(0, eq);
  // The top-level sections are objects even where the file leaves them out.
  for (const char* section : {"model", "task", "train", "eval"})
    if (path == section && !value.is_object())
      throw ConfigError(context + ": '" + path + "' is a section of the config; set one of its options (" + path +
                        ".NAME=VALUE), or give a whole JSON object");
  set_json_path(j, path, value, context);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  json j = read_json_file(path);
  if (!j.is_object())
    throw ConfigError(path + ": a config file must hold one JSON object ({\"model\": ..., \"train\": ...}), not " +
                      std::string(j.type_name() == std::string("array") ? "an " : "a ") + j.type_name());
  for (const auto& o : overrides) apply_override(j, o);
  try {
    return config_from_json(j);
  } catch (const ConfigError& e) {
    throw ConfigError(path + ": " + e.what());
  }
}

std::string first_difference(const Config& a, const Config& b, const std::vector<std::string>& may_differ) {
  for (const auto& op : json::diff(config_to_json(a), config_to_json(b))) {
    const std::string path = op.at("path");
    bool allowed = false;
    for (const auto& prefix : may_differ) allowed = allowed || path.rfind(prefix, 0) == 0;
    if (!allowed) return path;
  }
  return "";
}

}  // namespace posenc
