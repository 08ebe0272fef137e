// Where each attention head looks, over many examples and at several lengths
// (`posenc heads`): per block and head, the attention mass left of, on and
// right of the query, the mean distance |j - i| under it, and its entropy
// against that of a head flat over the keys the query sees. A local head's
// distance stays put as the length grows; a flat head's grows with the length,
// and so does what it averages over, which is how a model that is right at
// the training lengths can drift past them.
//
// Not for: one example's whole maps (`posenc attention`), what a scheme adds
// by itself (`posenc inspect`), what the residual stream holds (`posenc probe`).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <ATen/Tensor.h>

namespace posenc {

/// One head's attention averaged over the queries counted.
struct HeadStats {
  double left = 0;      ///< mass on keys j < i
  double self = 0;      ///< mass on key j = i
  double right = 0;     ///< mass on keys j > i
  double distance = 0;  ///< mean |j - i| under the attention
  double entropy = 0;   ///< in nats
  /// Entropy / log(keys the query sees), over the queries that see at least 2
  /// keys: 1 for a head flat over them, 0 for one that looks at one key.
  double flatness = 0;
  /// The mean of exp(entropy): about how many keys a query spreads its
  /// attention over (a local head's stays put as the length grows).
  double effective_keys = 0;
  /// The mean of what the attention multiplied the head's logits by (Scalable-Softmax's s_h log n, LogN
  /// scaling, the head scale, the logit scale); NaN where no such factor is on.
  double logit_factor = std::nan("");
};

/// Sums of per-query statistics of one attention module's self-attention,
/// added chunk by chunk of examples.
class HeadAccumulator {
 public:
  /// `maps` (B, H, L, L): attention probabilities, query by key. `queries` (B,
  /// L) bool: the queries counted. `keys` (B, L) bool: the keys that are
  /// tokens (not padding); with `causal` a query sees those at j <= i, else all, and with a `window` > 0 only
  /// those fewer than `window` positions away.
  /// `logit_factor` (1|B, H|1, L|1, 1): what the module multiplied each query's logits by
  /// (TransformerImpl::attention_logit_factors); undefined where no factor is on.
  void add(const at::Tensor& maps, const at::Tensor& queries, const at::Tensor& keys, bool causal, int64_t window = 0,
           const at::Tensor& logit_factor = {});
  /// Per head, the averages over every query added (empty before any).
  std::vector<HeadStats> stats() const;
  /// The mean |j - i| a head flat over the keys each query sees would have.
  double flat_distance() const;
  /// The mean number of keys a query sees: a flat head's effective keys.
  double flat_keys() const;
  int64_t queries() const { return queries_; }

 private:
  /// (H, 8) float64: left, self, right, distance, entropy, flatness, exp(entropy), logit factor
  at::Tensor sums_;
  bool has_factor_ = false;   ///< some chunk came with a logit factor
  int64_t queries_ = 0;       ///< queries counted
  int64_t flat_queries_ = 0;  ///< of them, those that see at least 2 keys
  double flat_distance_ = 0;  ///< the sum of a flat head's mean distance over the queries
  double flat_keys_ = 0;      ///< the sum of the keys each query sees
};

struct HeadsRequest {
  std::vector<int64_t> lengths;  ///< in the task's unit; empty: the checkpoint's eval.lengths
  int64_t samples = 100;         ///< examples per length, the first of the fixed evaluation set (eval.seed)
  std::string kind;             ///< ordering: count only examples of this kind ("sorted", "adjacent_swap", ...); "" all
  std::string queries = "all";  ///< "all", or "answer": a decoder's queries that predict an answer token
  /// `path=value` changes to the stored config that add or remove no parameter (with_evaluation_changes), e.g.
  /// model.attention.logn_from=32: the heads as the model reads with them.
  std::vector<std::string> overrides;
};

/// Head statistics of a trained checkpoint on its task's fixed evaluation
/// examples at each length: {"checkpoint", "scheme", "input_scheme", "task",
/// "kind", "example_kind", "queries", "trained_lengths", "lengths": [{"length",
/// "examples", "accuracy" (an encoder: the share of those examples it
/// classifies right; null otherwise), "blocks": [{"block", "causal",
/// "queries", "flat_distance", "keys_seen", "heads": [{"head", "left", "self",
/// "right", "distance", "entropy", "flatness", "effective_keys", "logit_factor"}]}]}]}
/// ("flat_distance" and "keys_seen": a flat head's distance and effective keys; "logit_factor": the mean of
/// what the head's logits were multiplied by, null where no factor is on). Blocks are "block N" (1-based), or
/// for an encoder_decoder "encoder block N" and "decoder block N" (its
/// self-attention; cross-attention relates two sequences, where j - i means
/// nothing, and is left out). Padding (token 0) is never a query, and is no
/// key a query sees. ConfigError for a request the checkpoint cannot serve.
nlohmann::json head_statistics(const std::string& checkpoint, const HeadsRequest& request);

}  // namespace posenc
