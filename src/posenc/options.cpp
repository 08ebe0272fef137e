// The one typed-value check behind every declared option (schemes' and tasks').
#include "posenc/options.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "posenc/errors.h"

namespace posenc {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

bool kind_matches(OptionKind k, const nlohmann::json& v) {
  switch (k) {
    case OptionKind::Int: return v.is_number_integer();
    case OptionKind::Float: return v.is_number();
    case OptionKind::Bool: return v.is_boolean();
    case OptionKind::String:
    case OptionKind::Path: return v.is_string();
    case OptionKind::Weights: return v.is_object();
  }
  return false;
}

void check_range(const OptionSpec& spec, const nlohmann::json& v, const std::string& at) {
  if (!v.is_number()) throw ConfigError(at + ": expected a number, got " + shown_value(v));
  const double x = v.get<double>();
  if (!(x >= spec.min && x <= spec.max)) {
    std::ostringstream msg;
    msg << at << ": " << shown_value(v) << " is out of range [" << spec.min << ", " << spec.max << "]";
    throw ConfigError(msg.str());
  }
}

/// A weights object: the declared keys only, each weight in range; keys left
/// out keep their default weight, and at least one weight must be positive.
nlohmann::json resolve_weights(const OptionSpec& spec, const nlohmann::json& v, const std::string& at) {
  nlohmann::json out = spec.default_value;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (std::find(spec.choices.begin(), spec.choices.end(), it.key()) == spec.choices.end())
      throw ConfigError(at + "." + it.key() + ": unknown key (known here: " + join(spec.choices) + ")");
    check_range(spec, it.value(), at + "." + it.key());
    out[it.key()] = it.value();
  }
  double total = 0;
  for (const auto& [key, w] : out.items()) total += w.get<double>();
  if (total <= 0) throw ConfigError(at + ": all weights are zero; at least one must be positive");
  return out;
}

}  // namespace

std::string option_kind_name(OptionKind k) {
  switch (k) {
    case OptionKind::Int: return "an integer";
    case OptionKind::Float: return "a number";
    case OptionKind::Bool: return "true or false";
    case OptionKind::String: return "a string";
    case OptionKind::Path: return "a file path";
    case OptionKind::Weights: return "an object of weights";
  }
  return "?";
}

Options resolve_options(const std::vector<OptionSpec>& specs, const nlohmann::json& user, const std::string& path,
                        const std::string& owner, const std::vector<std::string>& also_known, bool causal) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& spec : specs)
    out[spec.name] = causal && !spec.causal_value.is_null() ? spec.causal_value : spec.default_value;
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string at = path + "." + it.key();
    const auto spec_it =
        std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == it.key(); });
    if (spec_it == specs.end()) {
      std::vector<std::string> known = also_known;
      for (const auto& s : specs) known.push_back(s.name);
      throw ConfigError(at + ": unknown key for " + owner + " (known: " + (known.empty() ? "none" : join(known)) + ")");
    }
    const OptionSpec& spec = *spec_it;
    const auto& v = it.value();
    if (!kind_matches(spec.kind, v))
      throw ConfigError(at + ": expected " + option_kind_name(spec.kind) + ", got " + shown_value(v));
    if (spec.kind == OptionKind::Int || spec.kind == OptionKind::Float) check_range(spec, v, at);
    if (spec.kind == OptionKind::String) {
      const auto s = v.get<std::string>();
      if (s.empty()) throw ConfigError(at + ": must not be empty");
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), s) == spec.choices.end())
        throw ConfigError(at + ": " + shown_value(v) + " is not one of " + join(spec.choices));
    }
    if (causal && !spec.causal_value.is_null() && v != spec.causal_value)
      throw ConfigError(at + ": " + shown_value(v) +
                        " means nothing in a causal decoder (model.kind=decoder), where keys "
                        "right of the query are masked; leave it out or set " +
                        spec.causal_value.dump());
    if (spec.kind == OptionKind::Path) {
      const auto s = v.get<std::string>();
      if (s.empty()) throw ConfigError(at + ": must not be empty");
      std::error_code ec;
      const auto absolute = std::filesystem::absolute(s, ec);
      out[it.key()] = ec ? s : absolute.lexically_normal().string();
      continue;
    }
    out[it.key()] = spec.kind == OptionKind::Weights ? resolve_weights(spec, v, at) : v;
  }
  return Options(out);
}

std::string shown_value(const nlohmann::json& v) {
  const std::string text = v.dump();
  constexpr size_t kShown = 80;
  if (text.size() <= kShown) return text;
  return text.substr(0, kShown) + "... (" + std::to_string(text.size()) + " characters)";
}

namespace {
const nlohmann::json& option_value(const nlohmann::json& values, const std::string& name) {
  if (!values.contains(name)) throw std::logic_error("option '" + name + "' was not declared in its registry entry");
  return values.at(name);
}
}  // namespace

int64_t Options::get_int(const std::string& name) const { return option_value(values_, name).get<int64_t>(); }
double Options::get_float(const std::string& name) const { return option_value(values_, name).get<double>(); }
bool Options::get_bool(const std::string& name) const { return option_value(values_, name).get<bool>(); }
std::string Options::get_string(const std::string& name) const {
  return option_value(values_, name).get<std::string>();
}
std::map<std::string, double> Options::get_weights(const std::string& name) const {
  std::map<std::string, double> out;
  for (const auto& [key, w] : option_value(values_, name).items()) out[key] = w.get<double>();
  return out;
}

}  // namespace posenc
