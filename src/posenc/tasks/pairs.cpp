#include "posenc/tasks/pairs.h"

#include <algorithm>
#include <random>

#include "posenc/util/seeds.h"

namespace posenc {

std::vector<size_t> fixed_sample(std::vector<size_t> pool, int64_t n, int64_t seed, int64_t length) {
  if (static_cast<int64_t>(pool.size()) <= n) return pool;
  std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(length), 0x657673u}));
  std::shuffle(pool.begin(), pool.end(), rng);
  pool.resize(static_cast<size_t>(n));
  std::sort(pool.begin(), pool.end());
  return pool;
}

TaskBatch pair_rows(const std::vector<TokenPair>& pairs, const std::vector<size_t>& chosen, int64_t min_source_width,
                    int64_t eos, int64_t min_answer) {
  auto longest = static_cast<size_t>(min_answer);
  auto width = static_cast<size_t>(min_source_width);
  for (size_t i : chosen) {
    longest = std::max(longest, pairs[i].target.size());
    width = std::max(width, pairs[i].source.size());
  }
  TaskBatch b;
  b.tokens = torch::zeros({static_cast<int64_t>(chosen.size()), static_cast<int64_t>(width + 1 + longest + 1)},
                          torch::kLong);  // (n, S + 1 + A + 1)
  auto a = b.tokens.accessor<int64_t, 2>();
  for (size_t r = 0; r < chosen.size(); ++r) {
    const TokenPair& p = pairs[chosen[r]];
    for (size_t c = 0; c < p.source.size(); ++c) a[r][c] = p.source[c];
    a[r][width] = eos + 1;  // SEP
    for (size_t c = 0; c < p.target.size(); ++c) a[r][width + 1 + c] = p.target[c];
    a[r][width + 1 + p.target.size()] = eos;
  }
  b.answer_start = static_cast<int64_t>(width) + 1;
  b.padded = true;
  return b;
}

}  // namespace posenc
