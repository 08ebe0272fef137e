// Will it fit? The checks made before anything runs, so that a run that
// cannot finish fails at once with one line saying what to change, not after
// hours or by the kernel's out-of-memory killer:
//   - memory: upper estimates of a training step, an evaluation, a generation
//     and the model itself, against what the device has (require_memory: on
//     the CPU the least of MemAvailable, `ulimit -v` and the cgroup's
//     memory.max; on CUDA the device's free memory);
//   - lengths: longer than the model's position table, more than the task can
//     make, or options that mean nothing for the task.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/task.h"
#include "posenc/train/evaluate.h"

namespace posenc {

/// Bytes that evaluating `samples` examples of `tokens` tokens on `device` needs
/// at its peak, by an upper estimate: the token set, and per batch four
/// (B, H, L, L) float tensors (scores, bias, probabilities, a temporary; on CUDA
/// with fused attention only the bias and mask) plus activations.
double evaluation_memory_bytes(const Transformer& model, int64_t tokens, int64_t samples, int64_t max_batch_tokens,
                               torch::Device device = torch::kCPU);

/// Throws ConfigError "WHAT needs about N of memory (DETAIL), but M available
/// (which bound); ADVICE" if `need` bytes exceed what the device has: on the
/// CPU the least of MemAvailable, the address-space limit and the cgroup's
/// memory.max (util/memory_budget.h). Every memory check of posenc goes
/// through it.
void require_memory(double need, torch::Device device, const std::string& what, const std::string& detail,
                    const std::string& advice);

/// Throws ConfigError if a length cannot be evaluated at all: longer than the
/// model's position table, more than the task can make (charlm's held-out
/// text), or eval.oracle_length on a task without an end token.
void check_evaluation_lengths(const Transformer& model, const Task& task, const EvaluationSpec& spec,
                              const std::vector<int64_t>& lengths);

/// Throws ConfigError before anything runs if a length cannot fit: longer than
/// the model's position table, more than the task can make (charlm's held-out
/// text), or more memory than there is (require_memory).
void check_evaluation_fits(const Transformer& model, const Task& task, const EvaluationSpec& spec,
                           const std::vector<int64_t>& lengths, torch::Device device);

/// A lower bound on a model's parameters, counted from its config alone.
double model_parameters_at_least(const ModelConfig& model, int64_t vocab_size);
/// Throws ConfigError before the model is built if `copies` of it (the ranks
/// of --nproc) cannot fit by their parameters alone, with their gradients and
/// AdamW's two moments (16 bytes each): counted from the config, so that
/// nothing is allocated first.
void check_model_fits(const ModelConfig& model, int64_t vocab_size, torch::Device device, int copies = 1);

/// Throws ConfigError before training if one step on `batch_size` examples of
/// `tokens` tokens would need more memory than there is (as above), by an
/// upper estimate: weights, gradients, AdamW's moments and what the backward
/// pass keeps per layer.
/// `widest`: what in the task's data makes the examples that wide
/// (Task::widest_data), named in the error; empty where the length decides it.
void check_training_fits(const Transformer& model, int64_t tokens, int64_t batch_size, torch::Device device,
                         const std::string& widest = {});
/// That upper estimate, in bytes.
double training_memory_bytes(const Transformer& model, int64_t tokens, int64_t batch_size, torch::Device device);
/// The peak of one run of `cfg` on `device` by the same estimates: its training
/// step at task.max_length or the evaluation of its longest length, whichever
/// is larger (compare sizes its default --jobs on a GPU by it).
double run_memory_bytes(const Config& cfg, torch::Device device);
/// The same for generating a sequence of `tokens` tokens from a prompt of `prompt`.
void check_generation_fits(const Transformer& model, int64_t prompt, int64_t tokens, torch::Device device);

}  // namespace posenc
