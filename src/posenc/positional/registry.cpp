// The registry table of positional schemes.
#include "posenc/positional/registry.h"

#include "posenc/errors.h"
#include "posenc/positional/builtin_schemes.h"
#include "posenc/positional/scheme.h"
#include "posenc/util/text.h"

namespace posenc {

const std::vector<SchemeInfo>& scheme_registry() {
  // One line per scheme, in the order `posenc list` prints them.
  static const std::vector<SchemeInfo> table = {
      none_scheme_info(),   sinusoidal_scheme_info(), learned_scheme_info(), dynamic_scheme_info(),
      rope_scheme_info(),   xpos_scheme_info(),       alibi_scheme_info(),   t5_scheme_info(),
      kerple_scheme_info(), sandwich_scheme_info(),   fire_scheme_info(),    shaw_scheme_info(),
      xl_scheme_info(),     cope_scheme_info(),       fox_scheme_info(),     path_scheme_info(),
      ape_scheme_info(),    decay_scheme_info(),      da_scheme_info(),      dape_scheme_info(),
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
  throw ConfigError("unknown positional scheme \"" + name + "\" (known: " + join(scheme_names(), ", ") + ")");
}

SchemeOptions resolve_scheme_options(const SchemeInfo& info, const nlohmann::json& user, const std::string& path,
                                     bool causal) {
  return resolve_options(info.options, user, path, "scheme \"" + info.name + "\"", {}, causal);
}

nlohmann::json causal_scheme_options(const SchemeInfo& info, const nlohmann::json& resolved) {
  nlohmann::json out = resolved;
  for (const auto& spec : info.options)
    if (!spec.causal_value.is_null()) out[spec.name] = spec.causal_value;
  return out;
}

}  // namespace posenc
