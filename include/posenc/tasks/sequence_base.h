// What the decoder's sequence tasks share (tasks/sequence.cpp: copy, reverse
// and sort; tasks/arithmetic.cpp: addition and multiplication): the rows
// `x SEP y`, trained with the loss on y only and scored by greedy decoding of
// y, and their registry entry's common part. Every batch has one length, so
// nothing is padded.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "posenc/tasks/task.h"

namespace posenc {

/// Fills a (B, T) int64 tensor from rows of equal length.
torch::Tensor rows_to_tensor(const std::vector<std::vector<int64_t>>& rows);

/// Shared by every sequence task: its registry entry, SEP and the assembly of `x SEP y` rows.
class SequenceBase : public Task {
 public:
  SequenceBase(const TaskConfig& cfg, std::string name) : cfg_(cfg), name_(std::move(name)) {}
  const TaskInfo& info() const override { return find_task(name_); }
  int64_t sep() const { return vocab_size() + 1; }

 protected:
  /// n examples `x SEP y` of one shape from `example(x, y)`, with the position
  /// ids `ids` ((n, T) rows; empty: the model counts 0..T-1).
  template <typename Example>
  TaskBatch assemble(int64_t n, Example&& example, const std::vector<std::vector<int64_t>>& ids) const {
    std::vector<std::vector<int64_t>> rows;
    int64_t answer_start = 0;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> input, answer;
      example(input, answer);
      input.push_back(sep());
      answer_start = static_cast<int64_t>(input.size());
      input.insert(input.end(), answer.begin(), answer.end());
      rows.push_back(std::move(input));
    }
    TaskBatch b;
    b.tokens = rows_to_tensor(rows);  // (n, T)
    b.answer_start = answer_start;
    if (!ids.empty()) b.positions = rows_to_tensor(ids);  // (n, T)
    return b;
  }
  TaskConfig cfg_;

 private:
  std::string name_;
};

/// The tasks whose examples have one length: lengths and seeds. A subclass writes one example.
class SequenceTask : public SequenceBase {
 public:
  using SequenceBase::SequenceBase;

  TaskBatch train_batch(int64_t step, int64_t batch_size, int64_t seed) const override {
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x736571u}));
    const int64_t length = std::uniform_int_distribution<int64_t>(cfg_.min_length, cfg_.max_length)(rng);
    // Position offsets draw from a stream of their own: the tokens are the same whatever the ids.
    std::mt19937_64 offsets(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x706f73u}));
    return batch(length, batch_size, rng, &offsets);
  }
  TaskBatch fixed_set(int64_t length, int64_t n, int64_t seed) const override {
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(length), 0x657673u}));
    return batch(length, n, rng, nullptr);
  }

 protected:
  /// One example: the prompt `x SEP` (input) and the answer y.
  virtual void example(int64_t length, std::mt19937_64& rng, std::vector<int64_t>& input,
                       std::vector<int64_t>& answer) const = 0;
  /// The (n, T) ids of n examples of `length` (training draws offsets from
  /// `offsets`; evaluation passes none); empty: the model counts 0..T-1.
  virtual std::vector<std::vector<int64_t>> position_ids(int64_t /*length*/, int64_t /*n*/,
                                                         std::mt19937_64* /*offsets*/) const {
    return {};
  }

 private:
  TaskBatch batch(int64_t length, int64_t n, std::mt19937_64& rng, std::mt19937_64* offsets) const {
    return assemble(
        n, [&](std::vector<int64_t>& input, std::vector<int64_t>& answer) { example(length, rng, input, answer); },
        position_ids(length, n, offsets));
  }
};

/// The registry entry every sequence task starts from: decoder or
/// encoder_decoder, exact match, `task.vocab_size`, lengths in input tokens.
TaskInfo sequence_info(const std::string& name, const std::string& description);

}  // namespace posenc
