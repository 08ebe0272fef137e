#include "posenc/config_overlay.h"
#include "posenc/util/text.h"

#include <cctype>

namespace posenc {
namespace {

bool valid_name(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

}  // namespace

json axis_values(const json& j, const std::string& key, const std::string& where) {
  const OptionSpec& value = config_key(key);
  if (!j.is_array() || j.empty())
    throw ConfigError(where + ": expected a non-empty array of " + key + " values (" + option_kind_name(value.kind) +
                      " each)");
  OptionSpec axis = value;
  axis.kind = value.kind == OptionKind::Int ? OptionKind::IntList : OptionKind::StringList;
  axis.max_items = 1024;
  checked_value(axis, j, where);
  return j;
}

void check_keys(const json& j, const std::set<std::string>& allowed, const std::string& where) {
  if (!j.is_object()) throw ConfigError(where + ": expected a JSON object");
  for (const auto& [key, _] : j.items())
    if (!allowed.count(key))
      throw ConfigError(where + "." + key + ": unknown key (expected one of: " +
                        join(std::vector<std::string>(allowed.begin(), allowed.end()), ", ") + ")");
}

void apply_set(json& config, const json& set, const std::string& where) {
  if (!set.is_object()) throw ConfigError(where + ": expected an object of \"dotted.path\": value");
  for (const auto& [path, value] : set.items()) set_json_path(config, path, value, where + "." + path);
}

GridEntry grid_entry(const json& j, const std::string& where) {
  if (j.is_string()) return {j.get<std::string>(), {{"model.positional.type", j}}};
  check_keys(j, {"name", "set"}, where);
  if (!j.contains("name") || !j["name"].is_string()) throw ConfigError(where + ".name: expected a string");
  GridEntry e{j["name"], j.value("set", json::object())};
  if (!e.set.is_object()) throw ConfigError(where + ".set: expected an object of \"dotted.path\": value");
  if (!valid_name(e.name))
    throw ConfigError(where + ": name \"" + e.name +
                      "\" must be letters, digits, '-', '_' or '.' (it names run directories)");
  return e;
}

}  // namespace posenc
