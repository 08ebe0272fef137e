#include "posenc/util/bleu.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace posenc {

namespace {

/// Each n-gram of `tokens` with how often it occurs.
std::map<std::vector<int64_t>, int64_t> ngram_counts(const std::vector<int64_t>& tokens, size_t n) {
  std::map<std::vector<int64_t>, int64_t> counts;
  for (size_t i = 0; i + n <= tokens.size(); ++i)
    ++counts[std::vector<int64_t>(tokens.begin() + i, tokens.begin() + i + n)];
  return counts;
}

}  // namespace

void BleuCounts::add(const std::vector<int64_t>& hypothesis, const std::vector<int64_t>& reference) {
  hypothesis_length += static_cast<int64_t>(hypothesis.size());
  reference_length += static_cast<int64_t>(reference.size());
  for (int order = 1; order <= kMaxOrder; ++order) {
    const auto n = static_cast<size_t>(order);
    const auto in_reference = ngram_counts(reference, n);
    for (const auto& [gram, count] : ngram_counts(hypothesis, n)) {
      const auto it = in_reference.find(gram);
      matches[order - 1] += it == in_reference.end() ? 0 : std::min(count, it->second);  // clipped
    }
    totals[order - 1] += std::max<int64_t>(0, static_cast<int64_t>(hypothesis.size()) - order + 1);
  }
}

BleuCounts& BleuCounts::operator+=(const BleuCounts& other) {
  for (int i = 0; i < kMaxOrder; ++i) {
    matches[i] += other.matches[i];
    totals[i] += other.totals[i];
  }
  hypothesis_length += other.hypothesis_length;
  reference_length += other.reference_length;
  return *this;
}

double BleuCounts::precision(int n) const {
  const int64_t total = totals[n - 1];
  return total > 0 ? static_cast<double>(matches[n - 1]) / static_cast<double>(total) : 0.0;
}

double BleuCounts::brevity_penalty() const {
  if (hypothesis_length == 0) return 0.0;
  if (hypothesis_length >= reference_length) return 1.0;
  return std::exp(1.0 - static_cast<double>(reference_length) / static_cast<double>(hypothesis_length));
}

double BleuCounts::score() const {
  double log_sum = 0;
  for (int n = 1; n <= kMaxOrder; ++n) {
    const double p = precision(n);
    if (p <= 0) return 0.0;
    log_sum += std::log(p);
  }
  return 100.0 * brevity_penalty() * std::exp(log_sum / kMaxOrder);
}

}  // namespace posenc
