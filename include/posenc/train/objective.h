// What a training step optimizes, for both model kinds.
//
// Encoder: cross-entropy of the (B, 2) class logits against the labels.
// Decoder: the model reads tokens[:, :-1] and is scored on predicting
// tokens[:, answer_start:] only (the answer; every token after the first for
// language modelling): a loss mask, so the prompt `x SEP` costs nothing.
#pragma once

#include <torch/torch.h>

#include "posenc/model/transformer.h"
#include "posenc/tasks/task.h"

namespace posenc {

struct StepOutput {
  torch::Tensor loss;     ///< () mean over the scored predictions
  torch::Tensor correct;  ///< () int64: scored predictions whose argmax is right
  int64_t scored = 0;     ///< predictions scored (examples, or answer tokens)
};

/// `batch` must already be on the model's device; `ids` are optional position
/// ids for model->forward (randomized positions).
StepOutput task_objective(Transformer& model, const TaskBatch& batch, const torch::Tensor& ids = {});

/// The decoder's logits at the positions that predict the answer: (B, A, V + 2)
/// for tokens (B, T) with A = T - answer_start answer tokens.
torch::Tensor answer_logits(Transformer& model, const torch::Tensor& tokens, int64_t answer_start,
                            const torch::Tensor& ids = {});

}  // namespace posenc
