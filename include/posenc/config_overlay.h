// The pieces of a grid file that name config overlays: `posenc compare`'s
// comparison files and `posenc bench`'s case files both list schemes as a
// registry name or a named overlay of dotted config paths, and axes of a
// config key's values. No torch here.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "posenc/config.h"

namespace posenc {

/// Throws ConfigError "<where>.<key>: unknown key (expected one of: ...)" for a
/// key of the object j outside `allowed`, or if j is not an object.
void check_keys(const json& j, const std::set<std::string>& allowed, const std::string& where);

/// A grid's axis (its "qkv", "pooling" or "seeds"): a non-empty array of
/// values of the config key it sets (`key`, e.g. "model.attention.qkv"),
/// each checked by that key's declaration (its choices or bounds; no integer
/// twice); returns `j`. Errors name `where` and the index.
json axis_values(const json& j, const std::string& key, const std::string& where);

/// One entry of a "schemes" list: a registry name, or {"name", "set"}.
struct GridEntry {
  std::string name;
  json set;  ///< dotted path -> value
};
GridEntry grid_entry(const json& j, const std::string& where);
/// Applies {"dotted.path": value, ...} to a config JSON; errors start with `where`.
void apply_set(json& config, const json& set, const std::string& where);

}  // namespace posenc
