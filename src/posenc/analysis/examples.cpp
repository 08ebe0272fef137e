#include "posenc/analysis/examples.h"

#include "posenc/model/decoder.h"
#include "posenc/model/encoder.h"
#include "posenc/model/encoder_decoder.h"
#include "posenc/tasks/task.h"

namespace posenc {

ModelInputs model_inputs(const Transformer& model, const TaskBatch& set) {
  const int64_t T = set.tokens.size(1), a = set.answer_start;
  ModelInputs in;
  switch (model->config().kind) {
    case ModelKind::EncoderDecoder:
      in.tokens = set.tokens.narrow(1, 0, a - 1);      // (B, S): the source and its padding
      in.target = set.tokens.narrow(1, a - 1, T - a);  // (B, A): SEP y, less y's last token
      in.target_first = a - 1;
      break;
    case ModelKind::Decoder:
      in.tokens = set.tokens.narrow(1, 0, T - 1);  // (B, T - 1)
      if (set.positions.defined()) in.task_positions = set.positions.narrow(1, 0, T - 1);
      break;
    case ModelKind::Encoder: in.tokens = set.tokens; break;
  }
  return in;
}

ModelInputs rows_of(const ModelInputs& in, int64_t start, int64_t n) {
  const auto rows = [&](const at::Tensor& t) { return t.defined() ? t.narrow(0, start, n) : at::Tensor(); };
  return {rows(in.tokens), rows(in.target), rows(in.task_positions), in.target_first};
}

at::Tensor forward_inputs(Transformer& model, const ModelInputs& in, const std::string& what) {
  if (auto* both = model->as<EncoderDecoderImpl>()) return both->forward(in.tokens, in.target);
  if (auto* decoder = model->as<DecoderImpl>()) return decoder->forward(in.tokens, {}, in.task_positions);
  return classifier_of(model, what).forward(in.tokens);
}

}  // namespace posenc
