// Small helpers shared by the test files.
#pragma once

#include <string>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/positional/scheme.h"

namespace posenc::testing {

/// A config from the defaults with `path=value` overrides applied.
inline Config config_with(std::initializer_list<std::string> overrides) {
  json j = json::object();
  for (const auto& o : overrides) apply_override(j, o);
  return config_from_json(j);
}

/// A scheme built from its registry entry with default options (plus overrides).
inline PositionalScheme scheme_with(const std::string& type, const SchemeContext& ctx,
                                    const json& options = json::object()) {
  const auto& info = find_scheme(type);
  return info.make(ctx, resolve_scheme_options(info, options, "test"));
}

/// Positions 0..L-1 for queries and keys.
inline Positions arange_positions(int64_t L, ForwardCache* cache = nullptr) {
  auto ids = torch::arange(L, torch::kLong);
  return Positions{ids, ids, L, cache};
}

}  // namespace posenc::testing
