// Corpus BLEU (Papineni et al. 2002), the standard definition: modified n-gram
// precisions for n = 1..4, each clipped by the reference's count and summed
// over the whole corpus before dividing, their geometric mean, times the
// brevity penalty exp(1 - r/c) when the corpus's hypotheses (c tokens) are
// shorter than its references (r tokens). One reference per sentence, no
// smoothing: a corpus without a single matching 4-gram scores 0. Tokens are
// compared as integers (the task's token ids), so the tokenization is the
// task's. No torch here.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace posenc {

struct BleuCounts {
  static constexpr int kMaxOrder = 4;
  std::array<int64_t, kMaxOrder> matches{};  ///< clipped n-gram matches, n = 1..4
  std::array<int64_t, kMaxOrder> totals{};   ///< n-grams in the hypotheses
  int64_t hypothesis_length = 0, reference_length = 0;

  /// Adds one sentence pair's counts.
  void add(const std::vector<int64_t>& hypothesis, const std::vector<int64_t>& reference);
  BleuCounts& operator+=(const BleuCounts& other);
  /// Corpus BLEU in [0, 100] of everything added (0 for an empty corpus).
  double score() const;
  /// The modified precision of order n (1..4), matches / totals (0 when there are none).
  double precision(int n) const;
  /// 1 when the hypotheses are at least as long as the references, else exp(1 - r/c).
  double brevity_penalty() const;
};

}  // namespace posenc
