// The registry table and the generic validation of scheme options.
#include "posenc/positional/registry.h"

#include <sstream>

#include "posenc/config.h"
#include "posenc/positional/schemes.h"
#include "posenc/positional/scheme.h"

namespace posenc {

const std::vector<SchemeInfo>& scheme_registry() {
  // One line per scheme, in the order `posenc list` prints them.
  static const std::vector<SchemeInfo> table = {
      none_scheme_info(),
      sinusoidal_scheme_info(),
      learned_scheme_info(),
      dynamic_scheme_info(),
      rope_scheme_info(),
      xpos_scheme_info(),
      alibi_scheme_info(),
      t5_scheme_info(),
      kerple_scheme_info(),
      sandwich_scheme_info(),
      fire_scheme_info(),
      shaw_scheme_info(),
      xl_scheme_info(),
      cope_scheme_info(),
      ape_scheme_info(),
      decay_scheme_info(),
      da_scheme_info(),
  };
  return table;
}

std::vector<std::string> scheme_names() {
  std::vector<std::string> names;
  for (const auto& s : scheme_registry()) names.push_back(s.name);
  return names;
}

const SchemeInfo& find_scheme(const std::string& name) {
  for (const auto& s : scheme_registry())
    if (s.name == name) return s;
  std::string known;
  for (const auto& n : scheme_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown positional scheme \"" + name + "\" (known: " + known + ")");
}

PositionalScheme make_scheme(const std::string& type, const SchemeContext& ctx, const SchemeOptions& options) {
  return find_scheme(type).make(ctx, options);
}

namespace {

std::string kind_name(OptionKind k) {
  switch (k) {
    case OptionKind::Int: return "an integer";
    case OptionKind::Float: return "a number";
    case OptionKind::Bool: return "true or false";
    case OptionKind::String: return "a string";
  }
  return "?";
}

bool kind_matches(OptionKind k, const nlohmann::json& v) {
  switch (k) {
    case OptionKind::Int: return v.is_number_integer();
    case OptionKind::Float: return v.is_number();
    case OptionKind::Bool: return v.is_boolean();
    case OptionKind::String: return v.is_string();
  }
  return false;
}

}  // namespace

SchemeOptions resolve_scheme_options(const SchemeInfo& info, const nlohmann::json& user, const std::string& path,
                                     bool causal) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& spec : info.options)
    out[spec.name] = causal && !spec.causal_value.is_null() ? spec.causal_value : spec.default_value;
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string at = path + "." + it.key();
    const OptionSpec* spec = nullptr;
    for (const auto& s : info.options)
      if (s.name == it.key()) spec = &s;
    if (spec == nullptr) {
      std::string known;
      for (const auto& s : info.options) known += (known.empty() ? "" : ", ") + s.name;
      if (known.empty()) known = "none";
      throw ConfigError(at + ": unknown key for scheme \"" + info.name + "\" (known: " + known + ")");
    }
    const auto& v = it.value();
    if (!kind_matches(spec->kind, v))
      throw ConfigError(at + ": expected " + kind_name(spec->kind) + ", got " + v.dump());
    if (spec->kind == OptionKind::Int || spec->kind == OptionKind::Float) {
      const double x = v.get<double>();
      if (!(x >= spec->min && x <= spec->max)) {
        std::ostringstream msg;
        msg << at << ": " << v.dump() << " is out of range [" << spec->min << ", " << spec->max << "]";
        throw ConfigError(msg.str());
      }
    }
    if (spec->kind == OptionKind::String && !spec->choices.empty()) {
      const auto s = v.get<std::string>();
      if (std::find(spec->choices.begin(), spec->choices.end(), s) == spec->choices.end()) {
        std::string choices;
        for (const auto& c : spec->choices) choices += (choices.empty() ? "" : ", ") + c;
        throw ConfigError(at + ": \"" + s + "\" is not one of " + choices);
      }
    }
    if (causal && !spec->causal_value.is_null() && v != spec->causal_value)
      throw ConfigError(at + ": " + v.dump() + " means nothing in a causal decoder (model.kind=decoder), where keys "
                        "right of the query are masked; leave it out or set " + spec->causal_value.dump());
    out[it.key()] = v;
  }
  return SchemeOptions(out);
}

namespace {
const nlohmann::json& option_value(const nlohmann::json& values, const std::string& name) {
  if (!values.contains(name)) throw std::logic_error("scheme option '" + name + "' was not declared in its registry entry");
  return values.at(name);
}
}  // namespace

int64_t SchemeOptions::get_int(const std::string& name) const { return option_value(values_, name).get<int64_t>(); }
double SchemeOptions::get_float(const std::string& name) const { return option_value(values_, name).get<double>(); }
bool SchemeOptions::get_bool(const std::string& name) const { return option_value(values_, name).get<bool>(); }
std::string SchemeOptions::get_string(const std::string& name) const {
  return option_value(values_, name).get<std::string>();
}

}  // namespace posenc
