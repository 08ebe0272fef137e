// What a scheme contributes at initialization, as JSON: the input of the
// plotting scripts and of the golden tests (`posenc inspect`).
#pragma once

#include <array>
#include <string>

#include <nlohmann/json.hpp>

namespace posenc {

/// The most numbers posenc writes into one JSON document (inspect's
/// description, attention's maps): about 100 MB of text, which the plotting
/// scripts still read. Larger requests are refused before any work.
inline constexpr double kMaxJsonNumbers = double(1 << 22);

/// The (H, L, L) matrices a description may hold (see inspect_scheme), in the
/// order scripts/plot_compare.py draws them.
inline constexpr std::array<const char*, 4> kPairMatrixKeys = {"bias", "score_terms_of_ones", "value_terms_of_ones",
                                                               "reweighted_ones"};

struct InspectRequest {
  std::string scheme;
  int64_t length = 64;
  int64_t heads = 4;
  int64_t dim = 32;
  nlohmann::json options = nlohmann::json::object();  ///< scheme options (validated by the registry)
  int64_t seed = 0;                                   ///< initial values of learned parameters
};

/// {"scheme", "length", "heads", "dim", "options", "hooks", "directional",
///  "embedding": L x D (embedding-time schemes: embed() of zero tokens),
///  "bias": H x L x L (bias schemes),
///  "rotated_ones": L x D (rotary schemes: one head of width D, an all-ones vector rotated at each position),
///  "score_terms_of_ones": H x L x L (score-term schemes: what they add to q·k, before the 1/sqrt(Dh)
///  scale, for an all-ones query and key of width D/H),
///  "value_terms_of_ones": H x L x L (value-term schemes: what query i's output gains from
///  attending to key j alone, read out with an all-ones vector of width D/H),
///  "reweighted_ones": H x L x L (reweighting schemes: what they make of scores that are all 1)}
nlohmann::json inspect_scheme(const InspectRequest& request);

class PositionalSchemeImpl;
struct SchemeInfo;
class Options;  // options.h (a scheme's resolved options)
/// The same description of an existing (e.g. trained) scheme instance;
/// rotated_ones uses one head of width rotate_dim (inspect_scheme: dim).
nlohmann::json describe_scheme(PositionalSchemeImpl& scheme, const SchemeInfo& info, const Options& options,
                               int64_t length, int64_t heads, int64_t dim, int64_t rotate_dim, int64_t seed);

}  // namespace posenc
