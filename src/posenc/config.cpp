// Strict config parsing: every key known, every value typed and bounded.
#include "posenc/config.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unistd.h>

#include "posenc/positional/registry.h"
#include "posenc/tasks/registry.h"
#include "posenc/util/io.h"

namespace posenc {

const std::vector<ModelChoice>& model_choices() {
  static const std::vector<ModelChoice> choices = {
      {"pooling", "max", "the encoder's classifier reads the maximum of each feature over the positions"},
      {"pooling", "mean", "... the mean of each feature over the positions"},
      {"pooling", "cls", "... a CLS token's output (the token sits in front, at position 0)"},
      {"pooling", "lse",
       "... tau * log(mean exp(x / tau)) of each feature, a learned temperature tau per feature "
       "(mean as tau grows, max as it shrinks)"},
      {"token_embedding", "table", "one learned row per token value"},
      {"token_embedding", "numeric",
       "an encoder's token values v through fixed sinusoids of v at geometric scales and a learned projection: "
       "no row per value, so a vocabulary of 10^5 costs what 64 does"},
  };
  return choices;
}

namespace {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::string type_name(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

/// Reads the keys of one JSON object, remembering which were consumed so that
/// finish() can reject the rest as unknown.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) throw ConfigError(where() + ": expected an object, got " + type_name(j_));
  }

  std::string child(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  bool has(const std::string& key) {
    known_.insert(key);
    return j_.contains(key);
  }

  const json& raw(const std::string& key) {
    known_.insert(key);
    return j_.at(key);
  }

  void read(const std::string& key, int64_t& out, int64_t min, int64_t max) {
    if (!has(key)) return;
    const json& v = j_.at(key);
    if (!v.is_number_integer())
      throw ConfigError(child(key) + ": expected an integer, got " + type_name(v) + " " + shown_value(v));
    // An unsigned value above INT64_MAX would wrap to a negative one in the message.
    const bool too_large = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
    const int64_t x = too_large ? 0 : v.get<int64_t>();
    if (too_large || x < min || x > max)
      throw ConfigError(child(key) + ": " + shown_value(v) + " is out of range [" + std::to_string(min) + ", " +
                        std::to_string(max) + "]");
    out = x;
  }

  void read(const std::string& key, double& out, double min, double max) {
    if (!has(key)) return;
    const json& v = j_.at(key);
    if (!v.is_number())
      throw ConfigError(child(key) + ": expected a number, got " + type_name(v) + " " + shown_value(v));
    const double x = v.get<double>();
    if (!(x >= min && x <= max)) {
      std::ostringstream msg;
      msg << child(key) << ": " << x << " is out of range [" << min << ", " << max << "]";
      throw ConfigError(msg.str());
    }
    out = x;
  }

  void read(const std::string& key, bool& out) {
    if (!has(key)) return;
    const json& v = j_.at(key);
    if (!v.is_boolean()) throw ConfigError(child(key) + ": expected true or false, got " + shown_value(v));
    out = v.get<bool>();
  }

  void read(const std::string& key, std::string& out, const std::vector<std::string>& choices = {}) {
    if (!has(key)) return;
    const json& v = j_.at(key);
    if (!v.is_string())
      throw ConfigError(child(key) + ": expected a string, got " + type_name(v) + " " + shown_value(v));
    const std::string s = v.get<std::string>();
    if (!choices.empty() && std::find(choices.begin(), choices.end(), s) == choices.end())
      throw ConfigError(child(key) + ": " + shown_value(v) + " is not one of " + join(choices, ", "));
    out = s;
  }

  /// Keys not consumed by any read: the caller decides (error or pass-through).
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!known_.count(it.key())) out.push_back(it.key());
    return out;
  }

  void finish() const {
    const auto extra = unread();
    if (extra.empty()) return;
    std::vector<std::string> known(known_.begin(), known_.end());
    throw ConfigError(child(extra.front()) + ": unknown key (known here: " + join(known, ", ") + ")");
  }

 private:
  std::string where() const { return path_.empty() ? "config" : path_; }
  const json& j_;
  std::string path_;
  std::set<std::string> known_;
};

constexpr int64_t kBig = int64_t{1} << 40;

/// model.positional.cross and .input: a scheme name, or {"type": name, its
/// options...}, resolved against the scheme's registry entry into `name` and
/// `options`. Cross-attention's queries (target) and keys (source) are never
/// masked, so its options are resolved as for an encoder.
void parse_scheme_slot(const json& j, const std::string& path, bool causal, std::string& name, json& options) {
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
  options = resolve_scheme_options(info, user, path, causal).json();
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

/// `causal`: a decoder, where options with a causal value (t5's bidirectional)
/// take it. Not where the scheme in `type` reads ids a task defines
/// (`task_ids`, with no input slot or with task_ids "both"): ids are not in token order, and a key earlier
/// in the sequence may hold a larger id than its query.
PositionalConfig parse_positional(const json& j, const std::string& path, bool causal, bool task_ids) {
  PositionalConfig p;
  ObjectReader r(j, path);
  r.read("type", p.type);
  const SchemeInfo& info = [&]() -> const SchemeInfo& {
    try {
      return find_scheme(p.type);
    } catch (const ConfigError& e) {
      throw ConfigError(r.child("type") + ": " + e.what());
    }
  }();
  r.read("apply_to", p.apply_to, {"auto", "input", "every_layer"});
  r.read("share_across_layers", p.share_across_layers);
  if (r.has("randomize")) {
    ObjectReader rnd(r.raw("randomize"), r.child("randomize"));
    if (!rnd.has("max_position"))
      throw ConfigError(r.child("randomize") +
                        ": needs max_position (training positions are drawn from [0, max_position))");
    rnd.read("max_position", p.randomize_max_position, 2, int64_t{1} << 30);
    rnd.finish();
  }
  if (r.has("cross")) parse_scheme_slot(r.raw("cross"), r.child("cross"), /*causal=*/false, p.cross, p.cross_options);
  if (r.has("input")) parse_scheme_slot(r.raw("input"), r.child("input"), causal, p.input, p.input_options);
  check_scheme_pair(p, path);
  if (r.has("task_ids")) {
    r.read("task_ids", p.task_ids, {"input", "both"});
    if (p.input == "none")
      throw ConfigError(r.child("task_ids") + ": says which of two slots reads a task's position ids, but " + path +
                        ".input is none, so " + path + ".type=" + p.type + " reads them alone; leave task_ids out");
    if (!task_ids)
      throw ConfigError(r.child("task_ids") + "=" + p.task_ids +
                        ": the task defines no position ids (task.positions); leave task_ids out");
  }
  const bool type_reads_task_ids = task_ids && (p.input == "none" || p.task_ids == "both");
  // Everything else belongs to the scheme and is validated by its registry entry.
  json user = json::object();
  for (const auto& key : r.unread()) user[key] = r.raw(key);
  p.options = resolve_scheme_options(info, user, path, causal && !type_reads_task_ids).json();
  return p;
}

std::vector<std::string> choices_of(const std::string& key) {
  std::vector<std::string> out;
  for (const auto& c : model_choices())
    if (c.key == key) out.push_back(c.value);
  return out;
}

/// `task_ids`: the task defines each token's position id (TaskInfo::positions_end).
ModelConfig parse_model(const json& j, const std::string& path, bool task_ids) {
  ModelConfig m;
  ObjectReader r(j, path);
  r.read("kind", m.kind, {"encoder", "decoder", "encoder_decoder"});
  r.read("d_model", m.d_model, 1, 65536);
  r.read("heads", m.heads, 1, 1024);
  r.read("layers", m.layers, 1, 1024);
  r.read("decoder_layers", m.decoder_layers, 0, 1024);
  if (m.decoder_layers > 0 && m.kind != "encoder_decoder")
    throw ConfigError(r.child("decoder_layers") + ": only an encoder_decoder has a separate decoder (model.kind=" +
                      m.kind + " has model.layers blocks)");
  r.read("d_ff", m.d_ff, 1, 1 << 20);
  r.read("dropout", m.dropout, 0.0, 0.99);
  r.read("pooling", m.pooling, choices_of("pooling"));
  r.read("token_embedding", m.token_embedding, choices_of("token_embedding"));
  if (m.token_embedding == "numeric" && m.kind != "encoder")
    throw ConfigError(r.child("token_embedding") + ": \"numeric\" embeds an encoder's token values; model.kind=" +
                      m.kind + " predicts tokens through a head of one row per token: use \"table\"");
  if (m.token_embedding == "numeric" && m.d_model % 2 != 0)
    throw ConfigError(r.child("token_embedding") +
                      ": \"numeric\" embeds each value as sin/cos pairs, so model.d_model " + "must be even (it is " +
                      std::to_string(m.d_model) + ")");
  // A decoder predicts a token at every position and pools nothing. Configs
  // that posenc wrote for decoders record the default ("max"), so that one passes.
  if (m.kind != "encoder" && m.pooling != ModelConfig{}.pooling)
    throw ConfigError(r.child("pooling") + ": \"" + m.pooling + "\" pools the tokens of an encoder; model.kind=" +
                      m.kind + " predicts a token at every target position and pools nothing: leave model.pooling out");
  if (r.has("attention")) {
    ObjectReader a(r.raw("attention"), r.child("attention"));
    a.read("qkv", m.qkv, {"projected", "embedded"});
    a.finish();
  }
  if (m.qkv == "embedded" && m.token_embedding == "numeric")
    throw ConfigError(
        r.child("attention") +
        ".qkv: \"embedded\" reads block 1's q, k, v from rows of the token table, and "
        "model.token_embedding=numeric has no such table; use \"projected\" or token_embedding \"table\"");
  const bool causal = m.kind == "decoder";
  if (r.has("positional"))
    m.positional = parse_positional(r.raw("positional"), r.child("positional"), causal, task_ids);
  else
    m.positional = parse_positional(json::object(), r.child("positional"), causal, task_ids);
  r.finish();
  if (m.qkv == "embedded" && m.positional.input != "none")
    throw ConfigError(r.child("positional") + ".input=" + m.positional.input +
                      " adds positions to the residual stream before block 1, but model.attention.qkv=embedded reads "
                      "block 1's q, k, v straight from the token table; use \"projected\" or leave input out");
  if (m.kind == "encoder_decoder") {
    if (m.decoder_layers == 0) m.decoder_layers = m.layers;
    if (m.qkv == "embedded")
      throw ConfigError(r.child("attention") +
                        ".qkv: \"embedded\" reads block 1's q, k, v from the token table, which an encoder_decoder "
                        "shares between its encoder and decoder; use \"projected\"");
    if (m.positional.randomize_max_position > 0)
      throw ConfigError(r.child("positional") +
                        ".randomize: randomized positions are drawn for one sequence per example; an "
                        "encoder_decoder has two (source and target); leave randomize out");
    if (m.positional.input != "none")
      throw ConfigError(r.child("positional") +
                        ".input: a second scheme at the input is for an encoder or a decoder; an encoder_decoder "
                        "has two inputs (source and target): leave input out");
  } else if (m.positional.cross != "none") {
    throw ConfigError(r.child("positional") +
                      ".cross: only an encoder_decoder has cross-attention (model.kind=" + m.kind + ")");
  }
  if (m.d_model % m.heads != 0)
    throw ConfigError(path + ".heads: " + std::to_string(m.heads) + " does not divide " + path + ".d_model " +
                      std::to_string(m.d_model));
  return m;
}

TaskConfig parse_task(const json& j, const std::string& path) {
  TaskConfig t;
  ObjectReader r(j, path);
  // "name" is what configs and checkpoints written before the task registry call it.
  if (r.has("name") && r.has("type"))
    throw ConfigError(r.child("name") + ": give the task as " + r.child("type") + " only (name is its old spelling)");
  const std::string type_key = r.has("name") ? "name" : "type";
  r.read(type_key, t.type);
  const TaskInfo& info = [&]() -> const TaskInfo& {
    try {
      return find_task(t.type);
    } catch (const ConfigError& e) {
      throw ConfigError(r.child(type_key) + ": " + e.what());
    }
  }();
  t.min_length = info.default_min_length;
  t.max_length = info.default_max_length;
  r.read("min_length", t.min_length, 2, 1 << 20);
  r.read("max_length", t.max_length, 2, 1 << 20);
  // Everything else belongs to the task and is validated by its registry entry.
  json user = json::object();
  for (const auto& key : r.unread()) user[key] = r.raw(key);
  t.options =
      resolve_options(info.options, user, path, "task \"" + t.type + "\"", {"type", "min_length", "max_length"});
  if (t.min_length > t.max_length)
    throw ConfigError(path + ".min_length: " + std::to_string(t.min_length) + " is greater than " + path +
                      ".max_length " + std::to_string(t.max_length));
  return t;
}

TrainConfig parse_train(const json& j, const std::string& path) {
  TrainConfig t;
  ObjectReader r(j, path);
  r.read("steps", t.steps, 1, kBig);  // 0 would write results of an untrained model
  r.read("batch_size", t.batch_size, 2, 1 << 20);
  r.read("lr", t.lr, 0.0, 10.0);
  r.read("weight_decay", t.weight_decay, 0.0, 10.0);
  r.read("warmup_steps", t.warmup_steps, 0, kBig);
  r.read("min_lr_ratio", t.min_lr_ratio, 0.0, 1.0);
  r.read("grad_clip", t.grad_clip, 0.0, 1e9);
  r.read("eval_every", t.eval_every, 1, kBig);
  r.read("val_samples", t.val_samples, 2, 1 << 24);
  r.read("checkpoint_every", t.checkpoint_every, 1, kBig);
  r.read("log_every", t.log_every, 1, kBig);
  r.read("seed", t.seed, 0, kBig);
  r.read("device", t.device, {"auto", "cpu", "cuda"});
  r.read("threads", t.threads, 1, 1024);
  r.read("precision", t.precision, {"float32", "bf16"});
  r.read("cuda_graphs", t.cuda_graphs, {"auto", "on", "off"});
  r.read("out_dir", t.out_dir);
  r.read("backend", t.backend, {"auto", "gloo", "nccl"});
  r.read("bucket_mb", t.bucket_mb, 0.001, 4096.0);
  r.read("collective_timeout_s", t.collective_timeout_s, 1, 86400);
  r.finish();
  if (t.out_dir.empty()) throw ConfigError(path + ".out_dir: must not be empty");
  return t;
}

/// The integers of the array `v` at `where`, each in [lo, hi] and none twice
/// (evaluation lengths, operand digits); errors name the element.
std::vector<int64_t> distinct_integers(const json& v, const std::string& where, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!v[i].is_number_integer()) throw ConfigError(at + ": expected an integer, got " + shown_value(v[i]));
    const int64_t n = v[i].get<int64_t>();
    if (n < lo || n > hi)
      throw ConfigError(at + ": " + std::to_string(n) + " is out of range [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]");
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw ConfigError(at + ": " + std::to_string(n) + " appears twice");
    out.push_back(n);
  }
  return out;
}

EvalConfig parse_eval(const json& j, const std::string& path) {
  EvalConfig e;
  ObjectReader r(j, path);
  if (r.has("lengths")) {
    const json& v = r.raw("lengths");
    if (!v.is_array() || v.empty()) throw ConfigError(r.child("lengths") + ": expected a non-empty array of lengths");
    constexpr size_t kMaxLengths = 256;  // each is a separate evaluation set
    if (v.size() > kMaxLengths)
      throw ConfigError(r.child("lengths") + ": " + std::to_string(v.size()) + " lengths; at most " +
                        std::to_string(kMaxLengths) + " may be evaluated in one run");
    e.lengths = distinct_integers(v, r.child("lengths"), 2, 1 << 20);
  }
  r.read("samples_per_length", e.samples_per_length, 2, 1 << 24);
  r.read("seed", e.seed, 0, kBig);
  r.read("max_batch_tokens", e.max_batch_tokens, 1, kBig);
  r.read("oracle_length", e.oracle_length);
  if (r.has("operand_grid")) {
    const json& v = r.raw("operand_grid");
    constexpr size_t kMaxDigits = 32;  // the grid has size^2 evaluation sets
    if (!v.is_array() || v.empty() || v.size() > kMaxDigits)
      throw ConfigError(r.child("operand_grid") + ": expected a non-empty array of at most " +
                        std::to_string(kMaxDigits) + " operand lengths (digits)");
    e.operand_grid = distinct_integers(v, r.child("operand_grid"), 1, 1 << 16);
  }
  r.finish();
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
  if (c.model.kind != "decoder")
    throw ConfigError(
        what + ": task-defined positions are read by a decoder (model.kind=decoder), not model.kind=" + c.model.kind);
  if (c.model.positional.randomize_max_position > 0)
    throw ConfigError("model.positional.randomize: " + what +
                      " gives every token its position already; leave randomize out");
  // The schemes that read them: the input slot's where there is one (then
  // model.positional.type acts in attention over 0..L-1, unless task_ids is
  // "both"), else the one scheme.
  const PositionalConfig& p = c.model.positional;
  const bool paired = p.input != "none";
  if (paired) check_scheme_reads_task_ids(c, task, what, "model.positional.input", p.input, p.input_options, true);
  if (!paired || p.task_ids == "both")
    check_scheme_reads_task_ids(c, task, what, "model.positional.type", p.type, p.options, false);
}

}  // namespace

Config config_from_json(const json& j) {
  Config c;
  ObjectReader r(j, "");
  auto section = [&](const char* key, auto parse, auto& out) {
    out = parse(r.has(key) ? r.raw(key) : json::object(), key);
  };
  // The task first: whether it defines position ids decides how the model's
  // scheme options are read (parse_positional).
  section("task", parse_task, c.task);
  const TaskInfo& task = find_task(c.task.type);
  const bool task_ids = task.positions_end && task.positions_end(c.task, c.task.max_length) > 0;
  c.model = parse_model(r.has("model") ? r.raw("model") : json::object(), "model", task_ids);
  section("train", parse_train, c.train);
  section("eval", parse_eval, c.eval);
  r.finish();
  if (!(j.contains("eval") && j["eval"].is_object() && j["eval"].contains("lengths")))
    c.eval.lengths = task.default_eval_lengths;
  const auto& kinds = task.model_kinds;
  if (std::find(kinds.begin(), kinds.end(), c.model.kind) == kinds.end())
    throw ConfigError("task.type=" + c.task.type + " trains " + join(kinds, " or ") +
                      " models, but model.kind=" + c.model.kind + "; set model.kind=" + kinds.front() +
                      " or choose a task for a " + c.model.kind + " (posenc list)");
  if (!c.eval.operand_grid.empty() && !task.has_operands) {
    std::vector<std::string> with;
    for (const auto& t : task_registry())
      if (t.has_operands) with.push_back(t.name);
    throw ConfigError("eval.operand_grid: task.type=" + c.task.type +
                      " has no operands whose lengths could differ; tasks that do: " + join(with, ", "));
  }
  check_task_positions(c, task);
  return c;
}

namespace {

/// type, the lengths and the task's resolved options (tasks/registry.h).
json task_to_json(const TaskConfig& t) {
  json out = t.options.json();
  out["type"] = t.type;
  out["min_length"] = t.min_length;
  out["max_length"] = t.max_length;
  return out;
}

}  // namespace

json config_to_json(const Config& c) {
  json positional = c.model.positional.options;
  positional["type"] = c.model.positional.type;
  positional["apply_to"] = c.model.positional.apply_to;
  positional["share_across_layers"] = c.model.positional.share_across_layers;
  if (c.model.positional.randomize_max_position > 0)
    positional["randomize"] = {{"max_position", c.model.positional.randomize_max_position}};
  if (c.model.kind == "encoder_decoder") {
    json cross = c.model.positional.cross_options;
    cross["type"] = c.model.positional.cross;
    positional["cross"] = cross;
  }
  if (c.model.positional.input != "none") {
    json input = c.model.positional.input_options;
    input["type"] = c.model.positional.input;
    positional["input"] = input;
    if (c.model.positional.task_ids != "input") positional["task_ids"] = c.model.positional.task_ids;
  }
  json out = {
      {"model",
       {{"kind", c.model.kind},
        {"d_model", c.model.d_model},
        {"heads", c.model.heads},
        {"layers", c.model.layers},
        {"d_ff", c.model.d_ff},
        {"dropout", c.model.dropout},
        {"pooling", c.model.pooling},
        {"token_embedding", c.model.token_embedding},
        {"attention", {{"qkv", c.model.qkv}}},
        {"positional", positional}}},
      {"task", task_to_json(c.task)},
      {"train",
       {{"steps", c.train.steps},
        {"batch_size", c.train.batch_size},
        {"lr", c.train.lr},
        {"weight_decay", c.train.weight_decay},
        {"warmup_steps", c.train.warmup_steps},
        {"min_lr_ratio", c.train.min_lr_ratio},
        {"grad_clip", c.train.grad_clip},
        {"eval_every", c.train.eval_every},
        {"val_samples", c.train.val_samples},
        {"checkpoint_every", c.train.checkpoint_every},
        {"log_every", c.train.log_every},
        {"seed", c.train.seed},
        {"device", c.train.device},
        {"threads", c.train.threads},
        {"precision", c.train.precision},
        {"cuda_graphs", c.train.cuda_graphs},
        {"out_dir", c.train.out_dir},
        {"backend", c.train.backend},
        {"bucket_mb", c.train.bucket_mb},
        {"collective_timeout_s", c.train.collective_timeout_s}}},
      {"eval",
       {{"lengths", c.eval.lengths},
        {"samples_per_length", c.eval.samples_per_length},
        {"seed", c.eval.seed},
        {"max_batch_tokens", c.eval.max_batch_tokens},
        {"oracle_length", c.eval.oracle_length}}},
  };
  if (c.model.kind == "encoder_decoder") out["model"]["decoder_layers"] = c.model.decoder_layers;
  if (!c.eval.operand_grid.empty()) out["eval"]["operand_grid"] = c.eval.operand_grid;
  return out;
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
