#include "posenc/train/objective.h"
#include "posenc/model/encoder.h"

namespace posenc {

int64_t scored_predictions(const TaskBatch& batch) {
  if (batch.labels.defined()) return batch.labels.size(0);
  const auto answers = batch.tokens.narrow(1, batch.answer_start, batch.tokens.size(1) - batch.answer_start);
  return batch.padded ? answers.ne(0).sum().item<int64_t>() : answers.numel();
}

StepOutput task_objective(Transformer& model, const TaskBatch& batch, const torch::Tensor& ids, int64_t scored) {
  StepOutput out;
  out.scored = scored >= 0 ? scored : scored_predictions(batch);
  NextTokenModel* next = model->next_token();
  if (next == nullptr) {
    auto logits = classifier_of(model, "a classification batch").forward(batch.tokens, ids);  // (B, 2)
    out.loss = torch::nn::functional::cross_entropy(logits, batch.labels);
    out.correct = logits.detach().argmax(-1).eq(batch.labels).sum();
    return out;
  }
  const int64_t T = batch.tokens.size(1), a = batch.answer_start;
  auto logits = next->answer_logits(batch.tokens, a, ids, batch.positions);  // (B, A, V+2)
  auto targets = batch.tokens.narrow(1, a, T - a);                           // (B, A)
  // Token 0 is padding and never a target: ignored by the loss and the count.
  out.loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                                  torch::nn::functional::CrossEntropyFuncOptions().ignore_index(0));
  auto right = logits.detach().argmax(-1).eq(targets);
  out.correct = (batch.padded ? right.logical_and(targets.ne(0)) : right).sum();
  return out;
}

}  // namespace posenc
