// Declared options: what a positional scheme or a task takes beyond its name.
//
// A registry entry lists its options (name, type, default, bounds or choices,
// a one-line doc); resolve_options() checks what a user wrote against that list
// and fills in the defaults, so that config parsing, `--set`, `posenc list`,
// comparison grids and the generic tests all read one declaration. No torch here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace posenc {

enum class OptionKind {
  Int,
  Float,
  Bool,
  String,      ///< non-empty; one of `choices` when those are given
  Path,        ///< a file's path, non-empty; made absolute when read, so a run works from any directory
  Weights,     ///< an object {choice: weight}: keys from `choices`, weights in [min, max], at least one positive
  IntList,     ///< a non-empty array of at most `max_items` distinct integers, each in [min, max]
  StringList,  ///< an array (empty allowed) of at most `max_items` non-empty strings, each one of `choices` if given
  Scheme,      ///< a scheme's name, or {"type": name, its options}; the config reader resolves it
};

/// What another value of a config key means where a run already exists (`posenc train --resume`, `posenc
/// compare` over a directory that holds the run).
enum class RunPart {
  What,       ///< part of what the run is: another value is another run
  Resumable,  ///< --resume may take another value (more steps, other evaluation), but a finished run is not it
  Where,      ///< where or how the run goes, never what it computes: --resume takes another value, and a
              ///< finished run with another value is the run asked for
};

/// One declared option: its type, default, bounds or choices, and a one-line doc.
struct OptionSpec {
  std::string name;
  OptionKind kind;
  nlohmann::json default_value;
  std::string doc;
  double min = -1e300;  ///< inclusive bounds for Int, Float and each of Weights' weights
  double max = 1e300;
  std::vector<std::string> choices;  ///< String: allowed values (empty = any); Weights: the keys
  /// Non-null: the only value that means something in a causal decoder (keys
  /// right of the query are masked there); it is the default there, and any
  /// other value is an error.
  nlohmann::json causal_value = nullptr;
  std::vector<std::string> choice_docs;  ///< String: what each of `choices` does (empty: undocumented)
  size_t max_items = 0;                  ///< IntList: the most elements
  /// A key a trained model may be read with another value of (`posenc eval
  /// --set`, `posenc heads --set`): how it is evaluated (eval.*, a task's
  /// evaluation sets), where its data now lies (a moved text, checked to be the
  /// same), or a model key that changes what attention computes but adds or
  /// removes no parameter. evaluation_changes.h reads this flag; `posenc list`
  /// says it.
  bool set_on_trained = false;
  RunPart run_part = RunPart::What;  ///< a config key's; run_dir.h reads it, `posenc list` states it
};

/// `spec`, which a trained model may be read with changed (OptionSpec::set_on_trained).
inline OptionSpec set_on_trained(OptionSpec spec) {
  spec.set_on_trained = true;
  return spec;
}

/// Options after validation: every declared option present, typed.
class Options {
 public:
  Options() = default;
  explicit Options(nlohmann::json resolved) : values_(std::move(resolved)) {}
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  std::map<std::string, double> get_weights(const std::string& name) const;
  const nlohmann::json& json() const { return values_; }

 private:
  nlohmann::json values_ = nlohmann::json::object();
};

/// The declaration named `name` in `specs`, or nullptr.
const OptionSpec* find_option(const std::vector<OptionSpec>& specs, const std::string& name);

/// Checks `user` (an object of option values) against `specs` and fills in the
/// defaults. Errors are ConfigErrors that start with `path`.key and, for an
/// unknown key, name `owner` (`scheme "rope"`, `task "copy"`) and what it takes,
/// `also_known` listed first. `causal`: a decoder, where options with a
/// causal_value take that value.
Options resolve_options(const std::vector<OptionSpec>& specs, const nlohmann::json& user, const std::string& path,
                        const std::string& owner, const std::vector<std::string>& also_known = {}, bool causal = false);

/// The one typed-value check: `v` against `spec`, as the value to keep (a
/// path made absolute, weights with their defaults filled in). Errors are
/// ConfigErrors that start with `at`, the key's JSON path.
nlohmann::json checked_value(const OptionSpec& spec, const nlohmann::json& v, const std::string& at);

/// A bound of `spec` as a config would write it (integers without a fraction).
std::string shown_bound(const OptionSpec& spec, double bound);

/// "integer", "number", "string", "array", ...: what a JSON value is, for an error message.
std::string json_type_name(const nlohmann::json& v);

/// A value as JSON for an error message, cut to its first 80 characters (a
/// mistyped 10 MB value is not echoed whole).
std::string shown_value(const nlohmann::json& v);

/// "an integer", "a number", "true or false", "a string", "an object of weights", ...
std::string option_kind_name(OptionKind kind);

}  // namespace posenc
