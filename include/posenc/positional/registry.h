// The one table of positional schemes: name -> options, description, factory.
//
// It drives config parsing (options are validated against the entry), the
// `posenc list` output, the model builder and the generic tests. A new scheme
// is one source file defining a SchemeInfo and one line in registry.cpp, plus
// its declaration, tests, golden values and docs: docs/adding-a-scheme.md lists
// every file. Attention and the model are not among them.
// This header stays free of torch so that the config and CLI code need not parse it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/options.h"

namespace posenc {

class PositionalSchemeImpl;  // positional/scheme.h

/// A scheme's options after validation (options.h): every declared option present, typed.
using SchemeOptions = Options;

/// What the model knows when it builds a scheme.
struct SchemeContext {
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t layer = 0;    ///< index of the (first) block this instance serves
  bool causal = false;  ///< a decoder: queries never see keys to their right
};

/// Where a scheme acts when `apply_to` is "auto".
enum class Placement { Input, EveryLayer };

struct SchemeInfo {
  std::string name;
  std::string description;
  std::vector<OptionSpec> options;
  Placement default_placement = Placement::EveryLayer;
  std::function<std::shared_ptr<PositionalSchemeImpl>(const SchemeContext&, const SchemeOptions&)> make;
  /// Reads the position ids a task defines per example ((B, L), TaskBatch::positions)
  /// where the task has them: an embedding looked up or computed per id, or a
  /// bias over the difference of two ids (Positions::task_q, task_k).
  bool reads_task_positions = false;
};

/// All registered schemes, in listing order.
const std::vector<SchemeInfo>& scheme_registry();
/// Throws ConfigError listing the known names.
const SchemeInfo& find_scheme(const std::string& name);
std::vector<std::string> scheme_names();

/// Validates user options against the entry (resolve_options: unknown key, type,
/// bounds, choices), filling in defaults. `path` prefixes error messages (e.g. "model.positional").
/// `causal`: for a decoder, where options with a causal_value take that value.
SchemeOptions resolve_scheme_options(const SchemeInfo& info, const nlohmann::json& user, const std::string& path,
                                     bool causal = false);

/// Resolved options with every option that has a causal value set to it: an
/// encoder_decoder's decoder takes the encoder's options so (a directional
/// bias, say, is one-sided there whatever the encoder uses).
nlohmann::json causal_scheme_options(const SchemeInfo& info, const nlohmann::json& resolved);

}  // namespace posenc
