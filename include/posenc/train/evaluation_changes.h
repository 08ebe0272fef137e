// The changes a command may make to a trained model's stored config before it
// reads the model (`posenc eval --set`, `posenc heads --set`): evaluation
// settings, the scheme's options and the logit factors without a parameter,
// never anything that adds or removes a trained parameter.
#pragma once

#include <string>
#include <vector>

#include "posenc/config.h"

namespace posenc {

/// The model keys that change attention without a parameter (the logits' scale,
/// the keys a query sees), so that a trained model may be read with them changed.
const std::vector<std::string>& parameter_free_model_keys();

/// The checkpoint's config `stored` with `--set` assignments (`path=value`) that
/// leave the trained model as it is: eval.*, task.path (a moved text), the
/// scheme's own options (RoPE scaling, say) and parameter_free_model_keys(),
/// never the scheme's type, placement, or anything else of the model or
/// training. ConfigError, starting "--set", for any other key, or for options
/// that build a model without a parameter the stored one trained.
Config with_evaluation_changes(const Config& stored, const std::vector<std::string>& overrides);

}  // namespace posenc
