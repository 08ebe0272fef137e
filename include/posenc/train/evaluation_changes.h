// The changes a command may make to a trained model's stored config before it
// reads the model (`posenc eval --set`, `posenc heads --set`): the keys whose
// declaration says so (evaluation settings, a moved data file, the logit
// factors without a parameter) and the scheme's options, never anything that
// adds or removes a trained parameter.
#pragma once

#include <string>
#include <vector>

#include "posenc/config.h"

namespace posenc {

class Task;

/// What `--set` may change, in words for help texts and errors, from the declarations: eval.* (a block every key of
/// which is declared so), each other key declared set_on_trained, and the schemes' options.
std::string allowed_evaluation_changes();

/// The keys whose declaration says a trained model may be read with them
/// changed (OptionSpec::set_on_trained): the config blocks' (eval.*, the
/// logits' scale, the keys a query sees) in declaration order, then the tasks'
/// own options (task.path), each name once, as dotted paths.
const std::vector<std::string>& keys_set_on_trained();

/// The checkpoint's config `stored` with `--set` assignments (`path=value`) that
/// leave the trained model as it is: keys declared set_on_trained (those of
/// keys_set_on_trained(), a task's own only for that task) and the schemes' own
/// options (RoPE scaling, say; those of the input and cross slots too), never
/// which scheme acts or where (the keys of model.positional itself), nor
/// anything else of the model or training. ConfigError, starting "--set", for
/// any other key, or for options that build a model without a parameter the
/// stored one trained.
Config with_evaluation_changes(const Config& stored, const std::vector<std::string>& overrides);

/// A text the checkpoint recorded (charlm), against `task` made from `cfg`: a
/// text re-pointed with `--set task.path` must be the same one (ConfigError);
/// a text changed in place gives a warning, as what is read is then not the
/// run's own held-out text.
void check_data_identity(const Task& task, const Config& cfg, const std::vector<std::string>& overrides);

}  // namespace posenc
