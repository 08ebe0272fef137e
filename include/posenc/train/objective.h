// What a training step optimizes, for every model kind.
//
// Encoder: cross-entropy of the (B, 2) class logits against the labels.
// Decoder: the model reads tokens[:, :-1] and is scored on predicting
// tokens[:, answer_start:] only (the answer; every token after the first for
// language modelling): a loss mask, so the prompt `x SEP` costs nothing.
// Encoder-decoder: the same `x SEP y` rows; the encoder reads x (the source),
// the decoder reads `SEP y[:-1]` and predicts y (teacher forcing).
// Padding (token 0, in the answers of tasks whose examples differ in length)
// is never scored.
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
/// ids (randomized positions). `scored`, if known (>= 0),
/// is the batch's scored_predictions(), read before the batch left the CPU.
StepOutput task_objective(Transformer& model, const TaskBatch& batch, const torch::Tensor& ids = {},
                          int64_t scored = -1);

/// Predictions a batch scores: its examples (encoder) or its answer tokens that are not padding.
int64_t scored_predictions(const TaskBatch& batch);

}  // namespace posenc
