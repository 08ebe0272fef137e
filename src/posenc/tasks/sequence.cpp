// copy, reverse and sort for the causal decoder (rows `x SEP y`, shared with
// arithmetic in tasks/sequence_base.h):
//
//   copy     y = x
//   reverse  y = x reversed
//   sort     y = x sorted (the generative twin of the ordering task)
//
// The task length is n, the tokens of x.
#include <algorithm>
#include <random>

#include "posenc/tasks/builtin_tasks.h"
#include "posenc/tasks/sequence_base.h"

namespace posenc {

torch::Tensor rows_to_tensor(const std::vector<std::vector<int64_t>>& rows) {
  const auto B = static_cast<int64_t>(rows.size()), T = static_cast<int64_t>(rows.at(0).size());
  auto t = torch::empty({B, T}, torch::kLong);
  auto a = t.accessor<int64_t, 2>();
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < T; ++c) a[r][c] = rows[r][c];
  return t;
}

TaskInfo sequence_info(const std::string& name, const std::string& description) {
  TaskInfo t;
  t.name = name;
  t.description = description;
  t.model_kinds = {ModelKind::Decoder, ModelKind::EncoderDecoder};
  t.metric = TaskMetric::ExactMatch;
  t.options = {vocab_size_option()};
  t.length_unit = "input tokens";
  t.default_min_length = 4;
  t.default_max_length = 16;
  t.default_eval_lengths = {8, 16, 32, 64, 128};
  return t;
}

namespace {

/// copy, reverse and sort: x is `length` tokens drawn uniformly from 1..vocab_size.
///
/// task.positions=coupled (copy and reverse; Cho et al. 2024): x's tokens get
/// start+1 .. start+n, and the token that predicts an answer token carries the
/// id of the token of x it copies (for copy, SEP carries x_0's id and y_j
/// x_{j+1}'s; for reverse, SEP carries x_{n-1}'s and y_j x_{n-2-j}'s), so
/// the token to copy is always at id distance 0. The answer's last token
/// predicts nothing: copy gives it start+n+1, reverse start. start is drawn
/// per example from [0, position_offset] in training and is 0 in evaluation.
class PermutationTask : public SequenceTask {
 public:
  enum class Kind { Copy, Reverse, Sort };
  PermutationTask(const TaskConfig& cfg, std::string name, Kind kind)
      : SequenceTask(cfg, std::move(name)),
        kind_(kind),
        coupled_(kind != Kind::Sort && cfg.options.get_string("positions") == "coupled"),
        offset_(kind != Kind::Sort ? cfg.options.get_int("position_offset") : 0) {}
  int64_t vocab_size() const override { return cfg_.options.get_int("vocab_size"); }
  int64_t sequence_length(int64_t length) const override { return 2 * length + 1; }
  /// One past the largest id of an example of `length`, offsets included; 0 without coupled ids.
  static int64_t positions_end(Kind kind, const TaskConfig& cfg, int64_t length) {
    if (kind == Kind::Sort || cfg.options.get_string("positions") != "coupled") return 0;
    return (kind == Kind::Copy ? length + 2 : length + 1) + cfg.options.get_int("position_offset");
  }

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
  std::vector<std::vector<int64_t>> position_ids(int64_t length, int64_t n, std::mt19937_64* offsets) const override {
    if (!coupled_) return {};
    std::uniform_int_distribution<int64_t> draw(0, offset_);
    std::vector<std::vector<int64_t>> ids(n);
    for (auto& row : ids) {
      const int64_t start = offsets ? draw(*offsets) : 0;                 // one per example
      for (int64_t i = 0; i < length; ++i) row.push_back(start + 1 + i);  // x
      // SEP, y_0 .. y_{length-2}: each carries the id of the token of x that comes next in the answer.
      for (int64_t j = 0; j < length; ++j) row.push_back(kind_ == Kind::Copy ? start + 1 + j : start + length - j);
      row.push_back(kind_ == Kind::Copy ? start + length + 1 : start);  // y_{length-1}: predicts nothing
    }
    return ids;
  }

 private:
  Kind kind_;
  bool coupled_;
  int64_t offset_;
};

template <PermutationTask::Kind kind>
TaskInfo permutation_info(const std::string& name, const std::string& description) {
  TaskInfo t = sequence_info(name, description);
  t.make = [name](const TaskConfig& cfg) { return std::make_unique<PermutationTask>(cfg, name, kind); };
  if (kind != PermutationTask::Kind::Sort) {
    t.options.push_back({"positions",
                         OptionKind::String,
                         "sequence",
                         "position ids: sequence (0..T-1) or coupled (the token that predicts an answer token "
                         "carries the id of the input token it copies, Cho et al. 2024); read by the embedding "
                         "scheme",
                         0,
                         0,
                         {"sequence", "coupled"}});
    t.options.push_back({"position_offset", OptionKind::Int, 0,
                         "training only: coupled starts each example's ids at a random offset in [0, this]", 0,
                         1 << 20});
    t.positions_end = [](const TaskConfig& cfg, int64_t length) {
      return PermutationTask::positions_end(kind, cfg, length);
    };
  }
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

}  // namespace posenc
