#include "posenc/train/objective.h"

namespace posenc {

torch::Tensor answer_logits(Transformer& model, const torch::Tensor& tokens, int64_t answer_start,
                            const torch::Tensor& ids) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(answer_start >= 1 && answer_start < T, "answer_start ", answer_start, " outside [1, ", T, ")");
  auto logits = model->forward(tokens.narrow(1, 0, T - 1), ids);  // (B, T-1, V+2): logits[:, p] predicts token p+1
  return logits.narrow(1, answer_start - 1, T - answer_start);    // (B, A, V+2)
}

StepOutput task_objective(Transformer& model, const TaskBatch& batch, const torch::Tensor& ids) {
  StepOutput out;
  if (!model->is_decoder()) {
    auto logits = model->forward(batch.tokens, ids);  // (B, 2)
    out.loss = torch::nn::functional::cross_entropy(logits, batch.labels);
    out.correct = logits.detach().argmax(-1).eq(batch.labels).sum();
    out.scored = batch.labels.size(0);
    return out;
  }
  const int64_t T = batch.tokens.size(1), a = batch.answer_start;
  auto logits = answer_logits(model, batch.tokens, a, ids);  // (B, A, V+2)
  auto targets = batch.tokens.narrow(1, a, T - a);           // (B, A)
  out.loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  out.correct = logits.detach().argmax(-1).eq(targets).sum();
  out.scored = targets.numel();
  return out;
}

}  // namespace posenc
