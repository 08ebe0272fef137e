// The one typed-value check behind every declared option (schemes' and tasks').
#include "posenc/options.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <sstream>

#include "posenc/errors.h"
#include "posenc/util/text.h"

namespace posenc {
namespace {

bool kind_matches(OptionKind k, const nlohmann::json& v) {
  switch (k) {
    case OptionKind::Int: return v.is_number_integer();
    case OptionKind::Float: return v.is_number();
    case OptionKind::Bool: return v.is_boolean();
    case OptionKind::String:
    case OptionKind::Path: return v.is_string();
    case OptionKind::Weights: return v.is_object();
    case OptionKind::IntList:
    case OptionKind::StringList: return v.is_array();
    case OptionKind::Scheme: return v.is_string() || v.is_object();
  }
  return false;
}

void check_range(const OptionSpec& spec, const nlohmann::json& v, const std::string& at) {
  if (!v.is_number()) throw ConfigError(at + ": expected a number, got " + shown_value(v));
  // An unsigned value above INT64_MAX would wrap to a negative one in a comparison.
  const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const double x = v.get<double>();
  if (huge || !(x >= spec.min && x <= spec.max))
    throw ConfigError(at + ": " + shown_value(v) + " is out of range [" + shown_bound(spec, spec.min) + ", " +
                      shown_bound(spec, spec.max) + "]");
}

/// An integer list: non-empty, at most spec.max_items, each element an integer in range and none twice.
nlohmann::json checked_int_list(const OptionSpec& spec, const nlohmann::json& v, const std::string& at) {
  if (v.empty() || v.size() > spec.max_items)
    throw ConfigError(at + ": expected a non-empty array of at most " + std::to_string(spec.max_items) +
                      " integers, got " + (v.empty() ? std::string("an empty one") : std::to_string(v.size())));
  std::vector<int64_t> seen;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string element = at + "[" + std::to_string(i) + "]";
    if (!v[i].is_number_integer()) throw ConfigError(element + ": expected an integer, got " + shown_value(v[i]));
    check_range(spec, v[i], element);
    const int64_t n = v[i].get<int64_t>();
    if (std::find(seen.begin(), seen.end(), n) != seen.end())
      throw ConfigError(element + ": " + std::to_string(n) + " appears twice");
    seen.push_back(n);
  }
  return v;
}

/// A string list: at most spec.max_items, each a non-empty string (one of spec.choices when those are given).
nlohmann::json checked_string_list(const OptionSpec& spec, const nlohmann::json& v, const std::string& at) {
  if (v.size() > spec.max_items)
    throw ConfigError(at + ": expected an array of at most " + std::to_string(spec.max_items) + " strings, got " +
                      std::to_string(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string element = at + "[" + std::to_string(i) + "]";
    if (!v[i].is_string()) throw ConfigError(element + ": expected a string, got " + shown_value(v[i]));
    const std::string item = v[i].get<std::string>();
    if (item.empty()) throw ConfigError(element + ": must not be empty");
    if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), item) == spec.choices.end())
      throw ConfigError(element + ": " + shown_value(v[i]) + " is not one of " + join(spec.choices, ", "));
  }
  return v;
}

/// A weights object: the declared keys only, each weight in range; keys left
/// out keep their default weight, and at least one weight must be positive.
nlohmann::json resolve_weights(const OptionSpec& spec, const nlohmann::json& v, const std::string& at) {
  nlohmann::json out = spec.default_value;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (std::find(spec.choices.begin(), spec.choices.end(), it.key()) == spec.choices.end())
      throw ConfigError(at + "." + it.key() + ": unknown key (known here: " + join(spec.choices, ", ") + ")");
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
    case OptionKind::IntList: return "an array of integers";
    case OptionKind::StringList: return "an array of strings";
    case OptionKind::Scheme: return "a scheme name or an object {\"type\": name, ...}";
  }
  return "?";
}

std::string shown_bound(const OptionSpec& spec, double bound) {
  if (spec.kind == OptionKind::Int || spec.kind == OptionKind::IntList) {
    if (bound >= 9.2e18) return "2^63";
    return std::to_string(static_cast<int64_t>(bound));
  }
  std::ostringstream out;
  out << bound;
  return out.str();
}

nlohmann::json checked_value(const OptionSpec& spec, const nlohmann::json& v, const std::string& at) {
  if (!kind_matches(spec.kind, v))
    throw ConfigError(at + ": expected " + option_kind_name(spec.kind) + ", got " +
                      (v.is_null() ? std::string("null") : json_type_name(v) + " " + shown_value(v)));
  switch (spec.kind) {
    case OptionKind::Int:
    case OptionKind::Float: check_range(spec, v, at); return v;
    case OptionKind::Bool:
    case OptionKind::Scheme: return v;
    case OptionKind::String: {
      const auto s = v.get<std::string>();
      if (s.empty()) throw ConfigError(at + ": must not be empty");
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), s) == spec.choices.end())
        throw ConfigError(at + ": " + shown_value(v) + " is not one of " + join(spec.choices, ", "));
      return v;
    }
    case OptionKind::Path: {
      const auto s = v.get<std::string>();
      if (s.empty()) throw ConfigError(at + ": must not be empty");
      std::error_code ec;
      const auto absolute = std::filesystem::absolute(s, ec);
      return ec ? v : nlohmann::json(absolute.lexically_normal().string());
    }
    case OptionKind::Weights: return resolve_weights(spec, v, at);
    case OptionKind::IntList: return checked_int_list(spec, v, at);
    case OptionKind::StringList: return checked_string_list(spec, v, at);
  }
  return v;
}

const OptionSpec* find_option(const std::vector<OptionSpec>& specs, const std::string& name) {
  const auto it = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
  return it == specs.end() ? nullptr : &*it;
}

Options resolve_options(const std::vector<OptionSpec>& specs, const nlohmann::json& user, const std::string& path,
                        const std::string& owner, const std::vector<std::string>& also_known, bool causal) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& spec : specs)
    out[spec.name] = causal && !spec.causal_value.is_null() ? spec.causal_value : spec.default_value;
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string at = path + "." + it.key();
    const OptionSpec* found = find_option(specs, it.key());
    if (found == nullptr) {
      std::vector<std::string> known = also_known;
      for (const auto& s : specs) known.push_back(s.name);
      throw ConfigError(at + ": unknown key for " + owner + " (known: " + (known.empty() ? "none" : join(known, ", ")) +
                        ")");
    }
    const OptionSpec& spec = *found;
    out[it.key()] = checked_value(spec, it.value(), at);
    if (causal && !spec.causal_value.is_null() && it.value() != spec.causal_value)
      throw ConfigError(at + ": " + shown_value(it.value()) +
                        " means nothing in a causal decoder (model.kind=decoder), where keys "
                        "right of the query are masked; leave it out or set " +
                        spec.causal_value.dump());
  }
  return Options(out);
}

std::string json_type_name(const nlohmann::json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
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
