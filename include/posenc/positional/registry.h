// The one table of positional schemes: name -> options, description, factory.
//
// It drives config parsing (options are validated against the entry), the
// `posenc list` output, the model builder and the generic tests. Adding a
// scheme = one source file defining a SchemeInfo + one line in registry.cpp.
// This header stays free of torch so that the config and CLI code need not parse it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace posenc {

class PositionalSchemeImpl;  // positional/scheme.h

enum class OptionKind { Int, Float, Bool, String };

/// One option of a scheme: its type, default, bounds or choices, and a one-line doc.
struct OptionSpec {
  std::string name;
  OptionKind kind;
  nlohmann::json default_value;
  std::string doc;
  double min = -1e300;  ///< inclusive bounds for Int/Float
  double max = 1e300;
  std::vector<std::string> choices;  ///< allowed values for String (empty = any)
  /// Non-null: the only value that means something in a causal decoder (keys
  /// right of the query are masked there); it is the default there, and any
  /// other value is an error.
  nlohmann::json causal_value = nullptr;
};

/// A scheme's options after validation: every declared option present, typed.
class SchemeOptions {
 public:
  SchemeOptions() = default;
  explicit SchemeOptions(nlohmann::json resolved) : values_(std::move(resolved)) {}
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  const nlohmann::json& json() const { return values_; }

 private:
  nlohmann::json values_ = nlohmann::json::object();
};

/// What the model knows when it builds a scheme.
struct SchemeContext {
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t layer = 0;  ///< index of the (first) block this instance serves
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
};

/// All registered schemes, in listing order.
const std::vector<SchemeInfo>& scheme_registry();
/// Throws ConfigError listing the known names.
const SchemeInfo& find_scheme(const std::string& name);
std::vector<std::string> scheme_names();

/// Validates user options against the entry (unknown key, type, bounds, choices),
/// filling in defaults. `path` prefixes error messages (e.g. "model.positional").
/// `causal`: for a decoder, where options with a causal_value take that value.
SchemeOptions resolve_scheme_options(const SchemeInfo& info, const nlohmann::json& user,
                                     const std::string& path, bool causal = false);

}  // namespace posenc
