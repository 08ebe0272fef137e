#include "posenc/train/evaluation_changes.h"

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "posenc/errors.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/registry.h"
#include "posenc/tasks/task.h"
#include "posenc/util/text.h"

namespace posenc {

namespace {

/// `path` names an option of a scheme (model.positional.base, model.positional.input.scaling): a key under
/// model.positional that the block does not declare itself, or one under a scheme slot the block declares (input,
/// with, cross) other than its type.
bool is_scheme_option(const std::string& path) {
  const std::string prefix = "model.positional.";
  if (path.rfind(prefix, 0) != 0) return false;
  const std::string rest = path.substr(prefix.size());
  const std::string first = rest.substr(0, rest.find('.'));
  for (const OptionSpec& key : config_block("model.positional").keys)
    if (key.name == first)
      return key.kind == OptionKind::Scheme && rest.size() > first.size() && rest != first + ".type";
  return true;
}

/// The declarations `path` may name in `stored`: a config block's keys, and for task.* also the stored task's own.
std::vector<OptionSpec> declarations_under(const Config& stored, const std::string& block) {
  std::vector<OptionSpec> out;
  for (const ConfigBlock& b : config_blocks())
    if (b.path == block) out = b.keys;
  if (block == "task")
    for (const OptionSpec& o : find_task(stored.task.type).options) out.push_back(o);
  return out;
}

/// `path` (a dotted config key) is declared set_on_trained in `stored`'s config.
bool declared_set_on_trained(const Config& stored, const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return false;
  const std::vector<OptionSpec> declared = declarations_under(stored, path.substr(0, dot));
  const OptionSpec* o = find_option(declared, path.substr(dot + 1));
  return o != nullptr && o->set_on_trained;
}

/// The tasks' own options declared set_on_trained, as task.NAME, each name once, in registry order.
std::vector<const OptionSpec*> task_options_set_on_trained() {
  std::vector<const OptionSpec*> out;
  for (const TaskInfo& task : task_registry())
    for (const OptionSpec& o : task.options)
      if (o.set_on_trained &&
          std::none_of(out.begin(), out.end(), [&](const OptionSpec* seen) { return seen->name == o.name; }))
        out.push_back(&o);
  return out;
}

}  // namespace

std::string allowed_evaluation_changes() {
  std::vector<std::string> parts;
  for (const ConfigBlock& block : config_blocks()) {
    const bool whole =
        std::all_of(block.keys.begin(), block.keys.end(), [](const OptionSpec& key) { return key.set_on_trained; });
    if (whole) {
      parts.push_back(block.path + ".*");
      continue;
    }
    for (const OptionSpec& key : block.keys)
      if (key.set_on_trained) parts.push_back(block.path + "." + key.name);
  }
  for (const OptionSpec* o : task_options_set_on_trained())
    parts.push_back("task." + o->name + (o->kind == OptionKind::Path ? " (a moved copy of the same file)" : ""));
  return join(parts, ", ") +
         " and the schemes' own options (model.positional.*, model.positional.input.*, .with.* and .cross.*, not which "
         "scheme acts or where)";
}

const std::vector<std::string>& keys_set_on_trained() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const ConfigBlock& block : config_blocks())
      for (const OptionSpec& key : block.keys)
        if (key.set_on_trained) out.push_back(block.path + "." + key.name);
    for (const OptionSpec* o : task_options_set_on_trained()) out.push_back("task." + o->name);
    return out;
  }();
  return keys;
}

Config with_evaluation_changes(const Config& stored, const std::vector<std::string>& overrides) {
  nlohmann::json j = config_to_json(stored);
  for (const auto& o : overrides) {
    const std::string path = o.substr(0, o.find('='));
    if (path.rfind("model.positional.randomize", 0) == 0)
      throw ConfigError("--set " + o +
                        ": randomized positions change only the training batches (evaluation always uses positions "
                        "0..L-1), so there is nothing for --set to change");
    if (!is_scheme_option(path) && !declared_set_on_trained(stored, path))
      throw ConfigError("--set " + o + ": a trained model may be read with changes to " + allowed_evaluation_changes() +
                        " only; the rest is what the checkpoint was trained as");
    apply_override(j, o);
  }
  try {
    Config changed = config_from_json(j);
    // Building the model checks the scheme's options together (a scaling
    // without original_max_position, say) before any parameter is compared.
    Transformer probe(changed.model, task_vocab_size(changed.task));
    // Loading the checkpoint fails where the options add a parameter, but would
    // silently leave out one they remove (a gate's or an offset's weights).
    Transformer trained(stored.model, task_vocab_size(stored.task));
    const auto kept = probe->named_parameters();
    for (const auto& p : trained->named_parameters())
      if (kept.find(p.key()) == nullptr)
        throw ConfigError("the model these options build has no parameter " + p.key() +
                          ", which the checkpoint trained; --set may change only options that add or remove no "
                          "parameter");
    return changed;
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("--set: ") + e.what());
  }
}

void check_data_identity(const Task& task, const Config& cfg, const std::vector<std::string>& overrides) {
  const nlohmann::json recorded = cfg.task.options.json();
  if (recorded.value("bytes", int64_t{0}) == 0) return;  // trained before posenc recorded it, or not a file task
  const nlohmann::json now = task.data_identity();
  std::string difference;
  for (const auto& [key, value] : now.items())
    if (recorded.contains(key) && recorded.at(key) != value)
      difference = "task." + key + " " + recorded.at(key).dump() + " recorded, " + value.dump() + " now";
  if (difference.empty()) return;
  const bool repointed = std::any_of(overrides.begin(), overrides.end(),
                                     [](const std::string& o) { return o.rfind("task.path=", 0) == 0; });
  const std::string path = cfg.task.options.get_string("path");
  if (repointed)
    throw ConfigError("--set task.path: " + path + " is not the text the checkpoint was trained on (" + difference +
                      ")");
  spdlog::warn(
      "{} has changed since the checkpoint was trained ({}): what is read here is not the run's own held-out "
      "text",
      path, difference);
}

}  // namespace posenc
