// The changes a command may make to a trained model's stored config before it
// reads the model (`posenc eval --set`, `posenc heads --set`): evaluation
// settings, the scheme's options and the logit factors without a parameter,
// never anything that adds or removes a trained parameter.
#pragma once

#include <string>
#include <vector>

#include "posenc/config.h"

namespace posenc {

class Task;

/// What `--set` may change, in words for help texts and errors: eval.*, task.path, the logit factors without a
/// parameter and the scheme's options.
std::string allowed_evaluation_changes();

/// The config keys whose declaration says a trained model may be read with
/// them changed (OptionSpec::set_on_trained: the logits' scale, the keys a
/// query sees), as dotted paths, in declaration order.
const std::vector<std::string>& keys_set_on_trained();

/// The checkpoint's config `stored` with `--set` assignments (`path=value`) that
/// leave the trained model as it is: eval.*, task.path (a moved text), the
/// schemes' own options (RoPE scaling, say; those of the input and cross slots
/// too) and keys_set_on_trained(), never which scheme acts or where (the keys
/// of model.positional itself), nor anything else of the model or training. ConfigError, starting "--set", for any other key, or for options
/// that build a model without a parameter the stored one trained.
Config with_evaluation_changes(const Config& stored, const std::vector<std::string>& overrides);

/// A text the checkpoint recorded (charlm), against `task` made from `cfg`: a
/// text re-pointed with `--set task.path` must be the same one (ConfigError);
/// a text changed in place gives a warning, as what is read is then not the
/// run's own held-out text.
void check_data_identity(const Task& task, const Config& cfg, const std::vector<std::string>& overrides);

}  // namespace posenc
