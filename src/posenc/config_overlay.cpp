#include "posenc/config_overlay.h"
#include "posenc/util/text.h"

#include <algorithm>
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

std::string file_value_shape(const FileKey& key) {
  switch (key.value) {
    case FileValue::Text: return "a string";
    case FileValue::Path: return "the path of a file, relative to this one";
    case FileValue::Overlay: return "an object of \"dotted.path\": value";
    case FileValue::Entries:
      return std::string(key.all_schemes ? "\"all\" or " : "") +
             "a non-empty array of names or {\"name\", \"set\"} entries" +
             (key.all_schemes ? " (\"all\" in it: every registered scheme)" : "");
    case FileValue::Axis: {
      const OptionSpec& value = config_key(key.axis_of);
      std::string allowed;
      if (!value.choices.empty())
        allowed = " (one of " + join(value.choices, ", ") + ")";
      else if (value.kind == OptionKind::Int)
        allowed =
            " (integers in [" + shown_bound(value, value.min) + ", " + shown_bound(value, value.max) + "], none twice)";
      return "a non-empty array of " + key.axis_of + " values" + allowed;
    }
    case FileValue::Block: return "an object";
    case FileValue::Blocks: return "a non-empty array of objects";
  }
  return "?";
}

void check_file_keys(const json& j, const std::vector<FileKey>& keys, const std::string& where) {
  std::set<std::string> names;
  for (const FileKey& k : keys) names.insert(k.name);
  check_keys(j, names, where);
  for (const FileKey& k : keys) {
    const std::string at = where + "." + k.name;
    if (!j.contains(k.name)) {
      if (k.required) throw ConfigError(at + ": required (" + file_value_shape(k) + ")");
      continue;
    }
    const json& v = j[k.name];
    const auto all_objects = [&] {
      return std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_object(); });
    };
    const auto all_entries = [&] {
      return std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string() || e.is_object(); });
    };
    bool ok = true;
    switch (k.value) {
      case FileValue::Text: ok = v.is_string(); break;
      case FileValue::Path: ok = v.is_string() && !v.get<std::string>().empty(); break;
      case FileValue::Overlay:
      case FileValue::Block: ok = v.is_object(); break;
      case FileValue::Entries:
        ok = (k.all_schemes && v == "all") || (v.is_array() && !v.empty() && all_entries());
        break;
      case FileValue::Axis: axis_values(v, k.axis_of, at); break;  // says itself what is wrong, and where
      case FileValue::Blocks: ok = v.is_array() && !v.empty() && all_objects(); break;
    }
    if (!ok) throw ConfigError(at + ": expected " + file_value_shape(k) + ", got " + shown_value(v));
  }
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
