#include "posenc/positional/randomized.h"

#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "posenc/util/seeds.h"

namespace posenc {

torch::Tensor randomized_positions(int64_t length, int64_t max_position, int64_t seed, int64_t step) {
  if (length > max_position)
    throw std::invalid_argument("randomized_positions: " + std::to_string(length) + " ids from [0, " +
                                std::to_string(max_position) + ")");
  std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x706f73u}));
  // Floyd's sampling: `length` distinct values with `length` draws, whatever max_position is.
  std::set<int64_t> chosen;
  for (int64_t j = max_position - length; j < max_position; ++j) {
    const int64_t t = std::uniform_int_distribution<int64_t>(0, j)(rng);
    chosen.insert(chosen.count(t) ? j : t);
  }
  std::vector<int64_t> ids(chosen.begin(), chosen.end());  // sorted
  return torch::tensor(ids, torch::kLong);
}

}  // namespace posenc
