#include "posenc/analysis/trained.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "posenc/config.h"
#include "posenc/model/decoder.h"
#include "posenc/model/encoder.h"
#include "posenc/model/encoder_decoder.h"
#include "posenc/positional/inspect.h"
#include "posenc/positional/registry.h"
#include "posenc/tasks/ordering.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluate.h"
#include "posenc/util/tensor_values.h"

namespace posenc {

int requested_kind(const Transformer& model, const Task& task, const std::string& task_type, const std::string& kind) {
  const auto kinds = task.kind_names();
  if (model->is_decoder() || kinds.empty())
    throw ConfigError("--kind " + kind + ": the examples of task " + task_type +
                      " have no kinds (--kind picks among the ordering task's: sorted, shuffle, ...); leave it out");
  if (kind == "sorted") return kSortedKind;
  const auto it = std::find(kinds.begin(), kinds.end(), kind);
  if (it == kinds.end()) {
    std::string known = "sorted";
    for (const auto& k : kinds) known += ", " + k;
    throw ConfigError("--kind " + kind + ": task " + task_type + " has the kinds " + known);
  }
  return static_cast<int>(it - kinds.begin());
}

const char* slot_key(SchemeSlot slot) {
  switch (slot) {
    case SchemeSlot::Input: return "model.positional.input";
    case SchemeSlot::With: return "model.positional.with";
    case SchemeSlot::Type: break;
  }
  return "model.positional.type";
}

const std::string& slot_scheme(const PositionalConfig& p, SchemeSlot slot) {
  return slot == SchemeSlot::Input ? p.input : slot == SchemeSlot::With ? p.with : p.type;
}

nlohmann::json inspect_checkpoint(const std::string& checkpoint, int64_t length, SchemeSlot slot, int64_t block) {
  Config cfg;
  Transformer model = load_model(checkpoint, torch::kCPU, &cfg);
  const PositionalConfig& p = cfg.model.positional;
  if (block > 0 && slot == SchemeSlot::Input)
    throw ConfigError("--block: the input scheme acts before block 1 only; leave out --block or --input-scheme");
  if (block > cfg.model.layers)
    throw ConfigError(fmt::format("--block {}: {} has {} block(s)", block, checkpoint, cfg.model.layers));
  if (slot == SchemeSlot::With && p.with == "none")
    throw ConfigError(checkpoint +
                      ": the model has no second scheme in attention (its model.positional.with is none); leave out "
                      "--with-scheme to describe model.positional.type=" +
                      p.type);
  PositionalSchemeImpl* at_block = nullptr;
  if (block > 0)
    at_block = slot == SchemeSlot::With ? model->with_scheme_at_block(block) : model->scheme_at_block(block);
  if (block > 0 && at_block == nullptr && p.nope_block(block - 1))
    throw ConfigError(
        fmt::format("--block {}: model.positional.nope_every={} leaves block {} without positions; "
                    "choose a block whose number it does not divide",
                    block, p.nope_every, block));
  if (block > 0 && at_block == nullptr)
    throw ConfigError(
        fmt::format("--block {}: model.positional.type={} {}; leave out --block", block, p.type,
                    model->scheme_at_block(1) ? "adds positions before block 1 only" : "acts at no block"));
  PositionalSchemeImpl* scheme = at_block;
  if (block == 0) {
    if (slot == SchemeSlot::Input) scheme = model->input_scheme();
    if (slot == SchemeSlot::Type) scheme = model->first_scheme();
    for (int64_t b = 1; slot == SchemeSlot::With && scheme == nullptr && b <= cfg.model.layers; ++b)
      scheme = model->with_scheme_at_block(b);  // the first block it acts at
  }
  if (scheme == nullptr)
    throw ConfigError(checkpoint + (slot == SchemeSlot::Input
                                        ? ": the model has no input scheme (its model.positional.input is "
                                          "none); leave out --input-scheme to describe model.positional.type=" +
                                              p.type
                                        : std::string(": the model has no ") + slot_key(slot) + " instance"));
  if (scheme->max_positions() > 0) length = std::min(length, scheme->max_positions());
  const nlohmann::json& options = slot == SchemeSlot::Input  ? p.input_options
                                  : slot == SchemeSlot::With ? p.with_options
                                                             : p.options;
  auto out = describe_scheme(*scheme, find_scheme(slot_scheme(p, slot)), SchemeOptions(options), length,
                             cfg.model.heads, cfg.model.d_model, cfg.model.d_model / cfg.model.heads, cfg.train.seed);
  out["checkpoint"] = checkpoint;
  out["slot"] = slot_key(slot);
  if (block > 0) out["block"] = block;
  // Where the scheme reads the ids the task gives each token (Abacus, coupled),
  // training gave it ids below the task's bound (offsets included), not 0..length-1.
  // The second scheme in attention reads them where type does and it can.
  const int64_t ids_end = evaluation_spec(cfg).training_positions_end;
  const bool reads_ids = slot == SchemeSlot::With ? p.reads_task_ids(false) && find_scheme(p.with).reads_task_positions
                                                  : p.reads_task_ids(slot == SchemeSlot::Input);
  if (ids_end > 0 && reads_ids) out["trained_ids_end"] = ids_end;
  out["trained_lengths"] = {cfg.task.min_length, cfg.task.max_length};
  out["rotated_width"] = cfg.model.d_model / cfg.model.heads;  // one head, as the model rotates it
  out["cls_position"] = cfg.model.pooling == Pooling::Cls;     // position 0 holds the CLS token
  return out;
}

namespace {

/// One attention module's probabilities (1, H, Lq, Lk) as [head][query][key].
nlohmann::json maps_json(const torch::Tensor& w) {
  auto maps = w[0].to(torch::kFloat64).contiguous();  // (H, Lq, Lk)
  nlohmann::json heads = nlohmann::json::array();
  for (int64_t h = 0; h < maps.size(0); ++h) {
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t i = 0; i < maps.size(1); ++i) rows.push_back(tensor_values(maps[h][i]));
    heads.push_back(rows);
  }
  return heads;
}

/// Prepares the model to keep its attention maps on the next forward.
void keep_maps(Transformer& model) {
  model->eval();
  model->keep_attention(true);
  model->force_explicit_attention(true);  // the fused path does not expose its weights
}

/// Runs tokens (1, L) through the model keeping its attention maps: per layer,
/// head and query, the row of probabilities. `p_sorted` (encoder): P(class 1).
/// `task_positions` (1, L): the task's own ids of the tokens, where it defines them.
nlohmann::json attention_layers(Transformer& model, const torch::Tensor& tokens, double* p_sorted,
                                const torch::Tensor& task_positions = {}) {
  keep_maps(model);
  c10::InferenceMode guard;
  if (auto* decoder = model->as<DecoderImpl>())
    decoder->forward(tokens, {}, task_positions);
  else
    *p_sorted = torch::softmax(classifier_of(model, "attention maps").forward(tokens), -1)[0][1].item<double>();
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& w : model->attention_maps()) layers.push_back(maps_json(w));  // (1, H, L', L') each
  return layers;
}

/// The decoder's maps over one evaluation example (prompt and answer, teacher-forced).
nlohmann::json decoder_attention_example(const std::string& checkpoint, const AttentionRequest& r, const Config& cfg,
                                         const Task& task, Transformer& model) {
  task.check_eval_length(r.length);  // a length the task has no example of (SCAN's 23 actions) is named
  const TaskBatch set = task.fixed_set(r.length, r.index + 1, cfg.eval.seed);
  if (set.tokens.size(0) <= r.index)
    throw ConfigError("--index " + std::to_string(r.index) + ": the evaluation set at length " +
                      std::to_string(r.length) + " has only " + std::to_string(set.tokens.size(0)) + " examples");
  auto example = set.tokens.slice(0, r.index, r.index + 1);  // (1, T)
  auto tokens = example.narrow(1, 0, example.size(1) - 1);   // (1, T-1): what the model reads
  // The task's ids of those tokens (task.positions), where it defines them: what training and evaluation read.
  const auto ids = set.positions.defined() ? set.positions.slice(0, r.index, r.index + 1).narrow(1, 0, tokens.size(1))
                                           : torch::Tensor();
  double unused = 0;
  const nlohmann::json layers = attention_layers(model, tokens, &unused, ids);
  auto tok = example[0].contiguous();
  nlohmann::json task_ids = nullptr;
  if (ids.defined()) {
    auto row = ids[0].contiguous();
    task_ids = std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
  }
  return {{"checkpoint", checkpoint},
          {"task_positions", task_ids},
          {"scheme", cfg.model.positional.type},
          {"task", cfg.task.type},
          {"length", r.length},
          {"index", r.index},
          {"tokens", std::vector<int64_t>(tok.data_ptr<int64_t>(), tok.data_ptr<int64_t>() + tok.numel())},
          {"answer_start", set.answer_start},
          {"causal", true},
          {"trained_lengths", {cfg.task.min_length, cfg.task.max_length}},
          {"layers", layers}};
}

/// A token as the figures label it: the task's word or character, <sep>, <eos>, or its id.
std::string token_label(const Task& task, const Transformer& model, int64_t t) {
  if (t == task.end_token()) return "<eos>";
  if (t == model->cls_token()) return "<sep>";
  const std::string text = task.decode_text({t});
  if (text.empty() || text.front() == '<') return std::to_string(t);
  return text == " " ? "_" : text;
}

/// An encoder_decoder's maps over one evaluation example: the encoder's
/// self-attention over the source, and per decoder block its causal
/// self-attention over the target (teacher-forced: <sep> y1 .. yn) and its
/// cross-attention from the target to the source.
nlohmann::json encoder_decoder_attention_example(const std::string& checkpoint, const AttentionRequest& r,
                                                 const Config& cfg, const Task& task, Transformer& model) {
  task.check_eval_length(r.length);
  const TaskBatch set = task.fixed_set(r.length, r.index + 1, cfg.eval.seed);
  if (set.tokens.size(0) <= r.index)
    throw ConfigError("--index " + std::to_string(r.index) + ": the evaluation set at length " +
                      std::to_string(r.length) + " has only " + std::to_string(set.tokens.size(0)) + " examples");
  const auto row = set.tokens[r.index].contiguous();  // (T): source, padding, SEP, answer, EOS, padding
  const int64_t a = set.answer_start;
  const auto source = row.narrow(0, 0, a - 1);
  const int64_t S = source.ne(0).sum().item<int64_t>();  // the source's padding is at its end
  const int64_t A = row.narrow(0, a, row.size(0) - a).ne(0).sum().item<int64_t>();  // answer and EOS
  auto src = source.narrow(0, 0, S).unsqueeze(0);                                   // (1, S)
  auto tgt = row.narrow(0, a - 1, A).unsqueeze(0);                                  // (1, A): SEP y1 .. y(A-1)
  const double numbers =
      static_cast<double>(cfg.model.heads) * (cfg.model.layers * S * S + cfg.model.decoder_layers * (A * A + A * S));
  if (numbers > kMaxJsonNumbers)
    throw ConfigError(fmt::format(
        "--length {}: the attention maps would hold {:.0f} numbers, more than the {:.0f} one JSON file may hold; "
        "choose a shorter --length",
        r.length, numbers, kMaxJsonNumbers));
  keep_maps(model);
  c10::InferenceMode guard;
  auto logits = model->as<EncoderDecoderImpl>()->forward(src, tgt);  // (1, A, V + 2)
  const auto maps = model->attention_maps();  // encoder blocks, then (self, cross) per decoder block
  const size_t encoder_blocks = static_cast<size_t>(cfg.model.layers);
  TORCH_CHECK(maps.size() == encoder_blocks + 2 * static_cast<size_t>(cfg.model.decoder_layers),
              "unexpected number of attention maps");
  nlohmann::json encoder = nlohmann::json::array(), self = nlohmann::json::array(), cross = nlohmann::json::array();
  for (size_t i = 0; i < maps.size(); ++i) {
    if (i < encoder_blocks)
      encoder.push_back(maps_json(maps[i]));
    else
      ((i - encoder_blocks) % 2 == 0 ? self : cross).push_back(maps_json(maps[i]));
  }
  const auto labels = [&](const torch::Tensor& t) {
    std::vector<std::string> out;
    for (int64_t i = 0; i < t.size(1); ++i) out.push_back(token_label(task, model, t[0][i].item<int64_t>()));
    return out;
  };
  // Whether teacher forcing already gets every answer token right (the figure says so).
  const auto answer = row.narrow(0, a, A).unsqueeze(0);  // (1, A): y1 .. EOS
  const bool right = logits.argmax(-1).eq(answer).all().item<bool>();
  return {{"checkpoint", checkpoint},
          {"scheme", cfg.model.positional.type},
          {"cross_scheme", cfg.model.positional.cross},
          {"task", cfg.task.type},
          {"length", r.length},
          {"index", r.index},
          {"encoder_decoder", true},
          {"source", labels(src)},
          {"target", labels(tgt)},
          {"teacher_forced_right", right},
          {"trained_lengths", {cfg.task.min_length, cfg.task.max_length}},
          {"encoder", encoder},
          {"decoder_self", self},
          {"cross", cross}};
}

}  // namespace

namespace {

/// Every map of every layer and head goes into one JSON document: refuse, before
/// any work, a length whose maps would not fit in memory as JSON.
void check_maps_fit(const Transformer& model, const Config& cfg, int64_t tokens, int64_t length) {
  const double L = static_cast<double>(model->model_length(tokens));
  const double maps = static_cast<double>(cfg.model.layers) * cfg.model.heads;
  if (maps * L * L <= kMaxJsonNumbers) return;
  const auto longest = static_cast<int64_t>(std::sqrt(kMaxJsonNumbers / maps)) - (model->model_length(tokens) - length);
  throw ConfigError(fmt::format(
      "--length {}: the attention maps would hold {:.0f} numbers ({} layers x {} heads x {:.0f}^2), more than the "
      "{:.0f} one JSON file may hold; choose --length {} or less",
      length, maps * L * L, cfg.model.layers, cfg.model.heads, L, kMaxJsonNumbers, longest));
}

}  // namespace

nlohmann::json attention_example(const std::string& checkpoint, const AttentionRequest& r) {
  Config cfg;
  Transformer model = load_model(checkpoint, torch::kCPU, &cfg);
  if (r.length < 2) throw ConfigError("--length " + std::to_string(r.length) + ": an example needs at least 2 tokens");
  const std::unique_ptr<Task> task = make_task(cfg.task);
  if (r.kind_given) requested_kind(model, *task, cfg.task.type, r.kind);  // refused before any work
  model->check_length(task->sequence_length(r.length));
  if (model->as<EncoderDecoderImpl>()) return encoder_decoder_attention_example(checkpoint, r, cfg, *task, model);
  check_maps_fit(model, cfg, task->sequence_length(r.length), r.length);
  if (model->is_decoder()) return decoder_attention_example(checkpoint, r, cfg, *task, model);
  const int wanted = r.kind_given ? requested_kind(model, *task, cfg.task.type, r.kind) : kSortedKind;
  const TaskBatch set = task->fixed_set(r.length, cfg.eval.samples_per_length, cfg.eval.seed);
  int64_t found = -1, seen = 0;
  for (size_t i = 0; i < set.kinds.size() && found < 0; ++i)
    if (set.kinds[i] == wanted && seen++ == r.index) found = static_cast<int64_t>(i);
  if (found < 0)
    throw ConfigError("--index " + std::to_string(r.index) + ": the evaluation set at length " +
                      std::to_string(r.length) + " has only " + std::to_string(seen) + " examples of kind " + r.kind +
                      (seen == 0 ? " (its weight in task.negatives may be 0)" : ""));

  auto tokens = set.tokens.slice(0, found, found + 1);  // (1, L)
  double p_sorted = 0;
  const nlohmann::json layers = attention_layers(model, tokens, &p_sorted);
  auto tok = tokens[0].contiguous();
  return {{"checkpoint", checkpoint},
          {"scheme", cfg.model.positional.type},
          {"length", r.length},
          {"kind", r.kind},
          {"index", r.index},
          {"tokens", std::vector<int64_t>(tok.data_ptr<int64_t>(), tok.data_ptr<int64_t>() + tok.numel())},
          {"label", set.labels[found].item<int64_t>()},
          {"p_sorted", p_sorted},
          {"prediction", p_sorted >= 0.5 ? 1 : 0},
          {"cls", cfg.model.pooling == Pooling::Cls},
          {"trained_lengths", {cfg.task.min_length, cfg.task.max_length}},
          {"layers", layers}};
}

}  // namespace posenc
