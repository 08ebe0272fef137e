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

/// What a top-level key of a comparison grid or a bench file holds.
enum class FileValue {
  Text,     ///< a string
  Path,     ///< a non-empty string: a file, relative to the grid or bench file
  Overlay,  ///< {"dotted.path": value, ...}, applied to every run's config
  Entries,  ///< a non-empty array of names or {"name", "set"} overlays (grid_entry)
  Axis,     ///< a non-empty array of values of the config key `axis_of` (axis_values)
  Block,    ///< an object whose keys are declared where it is read
  Blocks,   ///< a non-empty array of such objects
};

/// One top-level key of a grid or bench file. A table of these per file kind
/// (grid_file_keys(), bench_file_keys()) is the one declaration that the key
/// check, `posenc list` and docs/configs.md read.
struct FileKey {
  std::string name;
  FileValue value = FileValue::Text;
  std::string doc;
  bool required = false;
  std::string axis_of;       ///< FileValue::Axis: the config key whose values it takes
  bool in_full = false;      ///< a comparison grid's "full" block may hold it
  bool all_schemes = false;  ///< FileValue::Entries: "all" (alone or as an item) stands for every scheme
};

/// What the key holds, in words: "a non-empty array of model.attention.qkv values (one of projected, embedded)".
std::string file_value_shape(const FileKey& key);

/// Checks j against a file's declared keys: an object, no unknown key, every
/// required key present, each value of its declared shape (an axis's values
/// as its config key takes them). Errors name `where` and the key.
void check_file_keys(const json& j, const std::vector<FileKey>& keys, const std::string& where);

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
