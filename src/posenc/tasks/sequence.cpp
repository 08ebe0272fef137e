// Sequence-to-sequence tasks for the causal decoder: `x SEP y`, trained with
// the loss on y only and scored by greedy decoding of y.
//
//   copy     y = x
//   reverse  y = x reversed
//   sort     y = x sorted (the generative twin of the ordering task)
//   addition x = a + b, two numbers of n digits written least-significant digit
//            first; y = their sum, n + 1 digits, also least-significant first
//            (the order in which a carry is computed; Lee et al. 2023).
//
// The task length is n (tokens of x; digits per operand for addition). Every
// batch has one length, so nothing is padded.
#include <algorithm>
#include <random>

#include "posenc/tasks/task.h"
#include "posenc/tasks/tasks.h"

namespace posenc {
namespace {

/// Fills a (B, T) int64 tensor from rows of equal length.
torch::Tensor to_tensor(const std::vector<std::vector<int64_t>>& rows) {
  const auto B = static_cast<int64_t>(rows.size()), T = static_cast<int64_t>(rows.at(0).size());
  auto t = torch::empty({B, T}, torch::kLong);
  auto a = t.accessor<int64_t, 2>();
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < T; ++c) a[r][c] = rows[r][c];
  return t;
}

/// Shared by every sequence task: lengths, seeds, assembly. A subclass writes one example.
class SequenceTask : public Task {
 public:
  SequenceTask(const TaskConfig& cfg, std::string name) : cfg_(cfg), name_(std::move(name)) {}
  const TaskInfo& info() const override { return find_task(name_); }
  int64_t sep() const { return vocab_size() + 1; }

  TaskBatch train_batch(int64_t step, int64_t batch_size, int64_t seed) const override {
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x736571u}));
    const int64_t length = std::uniform_int_distribution<int64_t>(cfg_.min_length, cfg_.max_length)(rng);
    return batch(length, batch_size, rng);
  }
  TaskBatch fixed_set(int64_t length, int64_t n, int64_t seed) const override {
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(length), 0x657673u}));
    return batch(length, n, rng);
  }

 protected:
  /// One example: the prompt `x SEP` (input) and the answer y.
  virtual void example(int64_t length, std::mt19937_64& rng, std::vector<int64_t>& input,
                       std::vector<int64_t>& answer) const = 0;
  TaskConfig cfg_;

 private:
  TaskBatch batch(int64_t length, int64_t n, std::mt19937_64& rng) const {
    std::vector<std::vector<int64_t>> rows;
    int64_t answer_start = 0;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> input, answer;
      example(length, rng, input, answer);
      input.push_back(sep());
      answer_start = static_cast<int64_t>(input.size());
      input.insert(input.end(), answer.begin(), answer.end());
      rows.push_back(std::move(input));
    }
    TaskBatch b;
    b.tokens = to_tensor(rows);  // (n, T)
    b.answer_start = answer_start;
    return b;
  }
  std::string name_;
};

/// copy, reverse and sort: x is `length` tokens drawn uniformly from 1..vocab_size.
class PermutationTask : public SequenceTask {
 public:
  enum class Kind { Copy, Reverse, Sort };
  PermutationTask(const TaskConfig& cfg, std::string name, Kind kind)
      : SequenceTask(cfg, std::move(name)), kind_(kind) {}
  int64_t vocab_size() const override { return cfg_.options.get_int("vocab_size"); }
  int64_t sequence_length(int64_t length) const override { return 2 * length + 1; }

 protected:
  void example(int64_t length, std::mt19937_64& rng, std::vector<int64_t>& input,
               std::vector<int64_t>& answer) const override {
    std::uniform_int_distribution<int64_t> token(1, vocab_size());
    input.resize(length);
    for (auto& t : input) t = token(rng);
    answer = input;
    if (kind_ == Kind::Reverse) std::reverse(answer.begin(), answer.end());
    if (kind_ == Kind::Sort) std::sort(answer.begin(), answer.end());
  }

 private:
  Kind kind_;
};

/// Digits 0..9 are tokens 1..10, '+' is 11; SEP is 12.
class AdditionTask : public SequenceTask {
 public:
  static constexpr int64_t kPlus = 11;
  explicit AdditionTask(const TaskConfig& cfg) : SequenceTask(cfg, "addition") {}
  int64_t vocab_size() const override { return 11; }
  int64_t sequence_length(int64_t length) const override { return 3 * length + 3; }

 protected:
  void example(int64_t length, std::mt19937_64& rng, std::vector<int64_t>& input,
               std::vector<int64_t>& answer) const override {
    std::uniform_int_distribution<int> digit(0, 9);
    std::vector<int> a(length), b(length);
    for (auto& d : a) d = digit(rng);
    for (auto& d : b) d = digit(rng);
    for (int d : a) input.push_back(d + 1);
    input.push_back(kPlus);
    for (int d : b) input.push_back(d + 1);
    int carry = 0;
    for (int64_t i = 0; i < length; ++i) {  // least-significant digit first
      const int s = a[i] + b[i] + carry;
      answer.push_back(s % 10 + 1);
      carry = s / 10;
    }
    answer.push_back(carry + 1);
  }
};

TaskInfo sequence_info(const std::string& name, const std::string& description) {
  TaskInfo t;
  t.name = name;
  t.description = description;
  t.model_kinds = {"decoder", "encoder_decoder"};
  t.metric = TaskMetric::ExactMatch;
  t.options = {vocab_size_option()};
  t.length_unit = "input tokens";
  t.default_min_length = 4;
  t.default_max_length = 16;
  t.default_eval_lengths = {8, 16, 32, 64, 128};
  return t;
}

template <PermutationTask::Kind kind>
TaskInfo permutation_info(const std::string& name, const std::string& description) {
  TaskInfo t = sequence_info(name, description);
  t.make = [name](const TaskConfig& cfg) { return std::make_unique<PermutationTask>(cfg, name, kind); };
  return t;
}

}  // namespace

TaskInfo copy_task_info() {
  return permutation_info<PermutationTask::Kind::Copy>("copy", "x SEP -> x (decoder; tokens 1..vocab_size)");
}
TaskInfo reverse_task_info() {
  return permutation_info<PermutationTask::Kind::Reverse>("reverse", "x SEP -> x reversed (decoder)");
}
TaskInfo sort_task_info() {
  return permutation_info<PermutationTask::Kind::Sort>("sort",
                                                       "x SEP -> x sorted (decoder; the generative twin of ordering)");
}
TaskInfo addition_task_info() {
  TaskInfo t = sequence_info("addition",
                             "a + b SEP -> a+b, n-digit operands and an (n+1)-digit sum, least-significant digit "
                             "first (decoder; length = digits per operand)");
  t.options = {};
  t.fixed_vocab_size = 11;
  t.length_unit = "digits per operand";
  t.make = [](const TaskConfig& cfg) { return std::make_unique<AdditionTask>(cfg); };
  return t;
}

}  // namespace posenc
