// Two schemes in one attention (model.positional.with): PaTH beside FoX's
// forget gate, RoPE beside a bias, ... The pair is itself a scheme whose hooks
// call both: their biases, score terms and value terms add, a rotation runs
// before the other's score terms read q and k (as attention orders the hooks
// of one scheme), and a reweighting applies to the sum. Attention and the
// model see one scheme; neither tests for a pair.
#pragma once

#include <string>

#include <torch/torch.h>

#include "posenc/positional/scheme.h"

namespace posenc {

/// The pair of `first` (model.positional.type) and `second` (model.positional.with),
/// neither owned: the model registers both as modules of their own, so their
/// parameters appear once. Throws IncompatibleConfig, naming both, where the two
/// cannot be combined by adding: either adds to the residual stream, both rotate
/// q and k, or both reweight the scores.
PositionalScheme pair_schemes(PositionalSchemeImpl* first, PositionalSchemeImpl* second, const std::string& first_name,
                              const std::string& second_name);

}  // namespace posenc
