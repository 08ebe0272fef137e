#include "posenc/tasks/ordering.h"
#include "posenc/tasks/builtin_tasks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace posenc {

TaskInfo OrderingTask::registry_info() {
  TaskInfo t;
  t.name = "ordering";
  t.description =
      "is this sequence of integers non-decreasing? (the ordering experiment; encoder classifier; negatives are "
      "permutations of a sorted draw: shuffle, adjacent_swap, random_swap, reverse)";
  t.model_kinds = {ModelKind::Encoder};
  t.metric = TaskMetric::Accuracy;
  t.options = {
      vocab_size_option(),
      {"negatives", OptionKind::Weights,
       nlohmann::json{{"shuffle", 1.0}, {"adjacent_swap", 1.0}, {"random_swap", 1.0}, {"reverse", 1.0}},
       "mixing weights of the negative kinds (each in [0, 1e9]; at least one positive)", 0.0, 1e9, negative_kinds()},
      {"value_window", OptionKind::Int, 0,
       "training sequences draw their tokens from a random window of this many consecutive values (0: all of "
       "1..vocab_size); a narrow window puts runs of equal tokens into short sequences",
       0, 1 << 24},
      {"value_window_share", OptionKind::Float, 1.0,
       "the share of training sequences that task.value_window applies to; the others draw from all of "
       "1..vocab_size (a mix of tie-heavy and tie-free sequences at every training length)",
       0.0, 1.0},
      set_on_trained({"eval_value_window", OptionKind::Int, 0,
                      "the same for validation and evaluation sets (0: all of 1..vocab_size): a long sequence over a "
                      "wide window has few ties, over a narrow one many",
                      0, 1 << 24})};
  t.length_unit = "tokens";
  t.default_min_length = 4;
  t.default_max_length = 16;
  t.default_eval_lengths = {8, 16, 32, 64, 128};
  t.make = [](const TaskConfig& cfg) { return std::make_unique<OrderingTask>(cfg); };
  t.probe_targets = {{"descent",
                      "1 where a token is smaller than the one before it, else 0, at every token but the first: the "
                      "local comparison that deciding sortedness needs"}};
  return t;
}

const TaskInfo& OrderingTask::info() const { return find_task("ordering"); }

TaskInfo ordering_task_info() { return OrderingTask::registry_info(); }

const std::vector<std::string>& OrderingTask::negative_kinds() {
  static const std::vector<std::string> kinds = {"shuffle", "adjacent_swap", "random_swap", "reverse"};
  return kinds;
}

OrderingTask::OrderingTask(const TaskConfig& cfg)
    : cfg_(cfg),
      vocab_size_(cfg.options.get_int("vocab_size")),
      train_window_(cfg.options.get_int("value_window")),
      eval_window_(cfg.options.get_int("eval_value_window")),
      train_window_share_(cfg.options.get_float("value_window_share")) {
  for (const auto& [name, window] : {std::pair<const char*, int64_t>{"value_window", train_window_},
                                     std::pair<const char*, int64_t>{"eval_value_window", eval_window_}})
    if (window == 1 || window > vocab_size_)
      throw ConfigError("task." + std::string(name) + ": " + std::to_string(window) +
                        (window == 1 ? " value cannot make a sorted sequence of two distinct tokens"
                                     : " is wider than task.vocab_size " + std::to_string(vocab_size_)) +
                        " (0 means all of 1.." + std::to_string(vocab_size_) + ")");
  // A share that changes nothing is refused, not ignored.
  if (train_window_ == 0 && train_window_share_ != 1.0)
    throw ConfigError("task.value_window_share=" + fmt::format("{}", train_window_share_) +
                      " means nothing without task.value_window (every sequence draws from all of 1.." +
                      std::to_string(vocab_size_) + "); set task.value_window or leave the share out");
  if (train_window_ > 0 && train_window_share_ == 0.0)
    throw ConfigError("task.value_window_share=0 applies task.value_window=" + std::to_string(train_window_) +
                      " to no sequence; leave task.value_window out, or give a share above 0");
  const auto negatives = cfg.options.get_weights("negatives");
  for (const auto& name : negative_kinds()) {
    auto it = negatives.find(name);
    weights_.push_back(it == negatives.end() ? 0.0 : it->second);
  }
}

bool OrderingTask::is_sorted(const std::vector<int64_t>& seq) { return std::is_sorted(seq.begin(), seq.end()); }

std::vector<int64_t> OrderingTask::positive(int64_t length, std::mt19937_64& rng, int64_t window) const {
  int64_t lo = 1, hi = vocab_size_;
  if (window > 0) {  // a random window [lo, lo + window - 1]; no extra draw without one (earlier runs reproduce)
    lo = std::uniform_int_distribution<int64_t>(1, vocab_size_ - window + 1)(rng);
    hi = lo + window - 1;
  }
  std::uniform_int_distribution<int64_t> token(lo, hi);
  std::vector<int64_t> seq(length);
  do {
    for (auto& t : seq) t = token(rng);
  } while (std::all_of(seq.begin(), seq.end(), [&](int64_t t) { return t == seq[0]; }));
  std::sort(seq.begin(), seq.end());
  return seq;
}

std::vector<int64_t> OrderingTask::negative(const std::vector<int64_t>& sorted, int kind, std::mt19937_64& rng) const {
  std::vector<int64_t> seq = sorted;
  const auto n = static_cast<int64_t>(seq.size());
  const std::string& name = negative_kinds().at(kind);
  if (name == "shuffle") {
    do std::shuffle(seq.begin(), seq.end(), rng);
    while (is_sorted(seq));
  } else if (name == "adjacent_swap") {
    std::vector<int64_t> unequal;  // i with seq[i] != seq[i+1]
    for (int64_t i = 0; i + 1 < n; ++i)
      if (seq[i] != seq[i + 1]) unequal.push_back(i);
    const int64_t i = unequal[std::uniform_int_distribution<size_t>(0, unequal.size() - 1)(rng)];
    std::swap(seq[i], seq[i + 1]);
  } else if (name == "random_swap") {
    std::uniform_int_distribution<int64_t> pos(0, n - 1);
    int64_t i, j;
    do {
      i = pos(rng);
      j = pos(rng);
    } while (seq[i] == seq[j]);  // a positive has two distinct tokens, so this ends
    std::swap(seq[i], seq[j]);
  } else {  // reverse: non-increasing with two distinct values, hence not sorted
    std::reverse(seq.begin(), seq.end());
  }
  return seq;
}

Batch OrderingTask::assemble(std::vector<std::vector<int64_t>> seqs, std::vector<int> kinds,
                             std::mt19937_64& rng) const {
  std::vector<size_t> order(seqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const auto B = static_cast<int64_t>(seqs.size()), L = static_cast<int64_t>(seqs[0].size());
  Batch b;
  b.tokens = torch::empty({B, L}, torch::kLong);
  b.labels = torch::empty({B}, torch::kLong);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto lab = b.labels.accessor<int64_t, 1>();
  for (int64_t r = 0; r < B; ++r) {
    const auto& s = seqs[order[r]];
    for (int64_t c = 0; c < L; ++c) tok[r][c] = s[c];
    lab[r] = kinds[order[r]] == kSortedKind ? 1 : 0;
    b.kinds.push_back(kinds[order[r]]);
  }
  return b;
}

Batch OrderingTask::train_batch(int64_t step, int64_t batch_size, int64_t seed) const {
  std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x7472u}));
  const int64_t length = std::uniform_int_distribution<int64_t>(cfg_.min_length, cfg_.max_length)(rng);
  std::discrete_distribution<int> kind(weights_.begin(), weights_.end());
  std::vector<std::vector<int64_t>> seqs;
  std::vector<int> kinds;
  for (int64_t i = 0; i < batch_size; ++i) {
    // With a share below 1, one extra draw per sequence decides whether it takes
    // the window; at the default 1 there is none, so earlier runs reproduce.
    const bool windowed = train_window_ > 0 && (train_window_share_ >= 1.0 || std::uniform_real_distribution<double>(
                                                                                  0.0, 1.0)(rng) < train_window_share_);
    auto p = positive(length, rng, windowed ? train_window_ : 0);
    if (i % 2 == 0) {
      seqs.push_back(std::move(p));
      kinds.push_back(kSortedKind);
    } else {
      const int k = kind(rng);
      seqs.push_back(negative(p, k, rng));
      kinds.push_back(k);
    }
  }
  return assemble(std::move(seqs), std::move(kinds), rng);
}

Batch OrderingTask::fixed_set(int64_t length, int64_t n, int64_t seed) const {
  std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(length), 0x6576u}));
  const int64_t n_neg = n / 2, n_pos = n - n_neg;
  // Negatives per kind in proportion to the weights (largest remainder).
  const double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  std::vector<int64_t> count(weights_.size());
  std::vector<std::pair<double, size_t>> remainder;
  int64_t assigned = 0;
  for (size_t k = 0; k < weights_.size(); ++k) {
    const double exact = n_neg * weights_[k] / total;
    count[k] = static_cast<int64_t>(std::floor(exact));
    assigned += count[k];
    remainder.push_back({exact - count[k], k});
  }
  std::sort(remainder.begin(), remainder.end(),
            [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  for (size_t r = 0; assigned < n_neg; ++r, ++assigned) count[remainder[r % remainder.size()].second]++;

  std::vector<std::vector<int64_t>> seqs;
  std::vector<int> kinds;
  for (int64_t i = 0; i < n_pos; ++i) {
    seqs.push_back(positive(length, rng, eval_window_));
    kinds.push_back(kSortedKind);
  }
  for (size_t k = 0; k < count.size(); ++k)
    for (int64_t i = 0; i < count[k]; ++i) {
      seqs.push_back(negative(positive(length, rng, eval_window_), static_cast<int>(k), rng));
      kinds.push_back(static_cast<int>(k));
    }
  return assemble(std::move(seqs), std::move(kinds), rng);
}

torch::Tensor OrderingTask::declared_probe_target(const std::string& /*name: descent, the only one*/, int64_t length,
                                                  int64_t n, int64_t seed) const {
  const auto tokens = fixed_set(length, n, seed).tokens;  // (n, L)
  auto values = torch::full(tokens.sizes(), std::nan(""), torch::kFloat64);
  if (tokens.size(1) > 1)
    values.narrow(1, 1, tokens.size(1) - 1)
        .copy_(tokens.narrow(1, 1, tokens.size(1) - 1).lt(tokens.narrow(1, 0, tokens.size(1) - 1)));
  return values;
}

}  // namespace posenc
