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

std::string allowed_evaluation_changes() {
  return "eval.*, task.path (a moved text), " + join(keys_set_on_trained(), ", ") +
         " and the schemes' own options (model.positional.*, model.positional.input.* and .cross.*, not which "
         "scheme acts or where)";
}

namespace {

/// `path` names an option of a scheme (model.positional.base, model.positional.input.scaling): a key under
/// model.positional that the block does not declare itself, or one under a scheme slot the block declares (input,
/// cross) other than its type.
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

}  // namespace

const std::vector<std::string>& keys_set_on_trained() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const ConfigBlock& block : config_blocks())
      for (const OptionSpec& key : block.keys)
        if (key.set_on_trained) out.push_back(block.path + "." + key.name);
    return out;
  }();
  return keys;
}

Config with_evaluation_changes(const Config& stored, const std::vector<std::string>& overrides) {
  const auto& keys = keys_set_on_trained();
  nlohmann::json j = config_to_json(stored);
  for (const auto& o : overrides) {
    const std::string path = o.substr(0, o.find('='));
    if (path.rfind("model.positional.randomize", 0) == 0)
      throw ConfigError("--set " + o +
                        ": randomized positions change only the training batches (evaluation always uses positions "
                        "0..L-1), so there is nothing for --set to change");
    const bool scheme_option = is_scheme_option(path);
    // task.path may point to a moved text; check_data_identity makes sure it is the same text.
    const bool set_on_trained = std::find(keys.begin(), keys.end(), path) != keys.end();
    if (!scheme_option && path.rfind("eval.", 0) != 0 && path != "task.path" && !set_on_trained)
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
