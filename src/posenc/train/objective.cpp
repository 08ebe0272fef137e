#include "posenc/train/objective.h"

namespace posenc {

torch::Tensor answer_logits(Transformer& model, const torch::Tensor& tokens, int64_t answer_start,
                            const torch::Tensor& ids, const torch::Tensor& task_positions) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(answer_start >= 1 && answer_start < T, "answer_start ", answer_start, " outside [1, ", T, ")");
  if (model->is_encoder_decoder()) {
    TORCH_CHECK(answer_start >= 2, "an encoder_decoder needs a source before SEP");
    // Source x = tokens[:, :a-1]; the decoder reads SEP y[:-1] = tokens[:, a-1:T-1].
    return model->encoder_decoder_forward(tokens.narrow(1, 0, answer_start - 1),
                                          tokens.narrow(1, answer_start - 1, T - answer_start));  // (B, A, V+2)
  }
  const auto read = task_positions.defined() ? task_positions.narrow(1, 0, T - 1) : task_positions;  // (B, T-1)
  auto logits =
      model->forward(tokens.narrow(1, 0, T - 1), ids, read);    // (B, T-1, V+2): logits[:, p] predicts token p+1
  return logits.narrow(1, answer_start - 1, T - answer_start);  // (B, A, V+2)
}

int64_t scored_predictions(const TaskBatch& batch) {
  if (batch.labels.defined()) return batch.labels.size(0);
  const auto answers = batch.tokens.narrow(1, batch.answer_start, batch.tokens.size(1) - batch.answer_start);
  return batch.padded ? answers.ne(0).sum().item<int64_t>() : answers.numel();
}

StepOutput task_objective(Transformer& model, const TaskBatch& batch, const torch::Tensor& ids, int64_t scored) {
  StepOutput out;
  out.scored = scored >= 0 ? scored : scored_predictions(batch);
  if (!model->is_decoder()) {
    auto logits = model->forward(batch.tokens, ids);  // (B, 2)
    out.loss = torch::nn::functional::cross_entropy(logits, batch.labels);
    out.correct = logits.detach().argmax(-1).eq(batch.labels).sum();
    return out;
  }
  const int64_t T = batch.tokens.size(1), a = batch.answer_start;
  auto logits = answer_logits(model, batch.tokens, a, ids, batch.positions);  // (B, A, V+2)
  auto targets = batch.tokens.narrow(1, a, T - a);                            // (B, A)
  // Token 0 is padding and never a target: ignored by the loss and the count.
  out.loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                                  torch::nn::functional::CrossEntropyFuncOptions().ignore_index(0));
  auto right = logits.detach().argmax(-1).eq(targets);
  out.correct = (batch.padded ? right.logical_and(targets.ne(0)) : right).sum();
  return out;
}

}  // namespace posenc
