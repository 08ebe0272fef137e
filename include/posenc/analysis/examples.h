// What a trained model reads of a task's evaluation rows, and one forward over
// some of them: shared by the analyses that look inside a forward pass
// (`posenc probe`, `posenc heads`), so that each reads the rows the way
// training and evaluation do.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/Tensor.h>

namespace posenc {

class Transformer;
struct TaskBatch;

/// The model's inputs over a task's rows (B, T). An encoder reads every token
/// (and CLS before them, if it pools by CLS); a decoder every token but the
/// last (which it only predicts); an encoder_decoder reads the source x
/// (columns [0, answer_start - 1)) with its encoder and the target SEP y, less
/// y's last token, with its decoder.
struct ModelInputs {
  at::Tensor tokens;          ///< (B, L): what the stack reads (an encoder_decoder's encoder: the source)
  at::Tensor target;          ///< (B, A): what an encoder_decoder's decoder reads; undefined otherwise
  at::Tensor task_positions;  ///< (B, L): a decoder's task-defined ids, where the task defines them
  int64_t target_first = 0;   ///< the rows' column of the target's first token (SEP), for an encoder_decoder
};
ModelInputs model_inputs(const Transformer& model, const TaskBatch& set);

/// Rows [start, start + n) of `inputs`, as model_inputs made them (any defined field narrowed).
ModelInputs rows_of(const ModelInputs& inputs, int64_t start, int64_t n);

/// One inference forward of `model` over all of `inputs`: the classifier's
/// logits (B, 2), or the next-token logits. The caller holds the model in eval
/// and inference mode; `what` names the analysis where the model is not one
/// it can read.
at::Tensor forward_inputs(Transformer& model, const ModelInputs& inputs, const std::string& what);

}  // namespace posenc
