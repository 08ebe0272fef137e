#include "posenc/model/decoder.h"
#include "posenc/util/linear.h"

namespace posenc {

DecoderImpl::DecoderImpl(const ModelConfig& cfg, int64_t vocab_size) : TransformerImpl(cfg, vocab_size) {
  TORCH_CHECK(cfg.kind == ModelKind::Decoder, "DecoderImpl built from a config of model.kind=", name_of(cfg.kind));
  register_token_embedding();
  place_stack_schemes(/*causal=*/true);
  register_stack(/*causal=*/true);
  register_head(vocab_size + 2);
}

torch::Tensor DecoderImpl::forward(const torch::Tensor& tokens, const torch::Tensor& given_ids,
                                   const torch::Tensor& task_positions) {
  int64_t end = 0;                                         // one past the largest id, known on the host
  const auto ids = position_ids(tokens, given_ids, &end);  // (L)
  return linear(head_, run_stack(tokens, ids, end, nullptr, {}, task_positions));  // (B, L, V + 2)
}

torch::Tensor DecoderImpl::answer_logits(const torch::Tensor& tokens, int64_t answer_start, const torch::Tensor& ids,
                                         const torch::Tensor& task_positions) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(answer_start >= 1 && answer_start < T, "answer_start ", answer_start, " outside [1, ", T, ")");
  const auto read = task_positions.defined() ? task_positions.narrow(1, 0, T - 1) : task_positions;  // (B, T-1)
  auto logits = forward(tokens.narrow(1, 0, T - 1), ids, read);  // (B, T-1, V+2): logits[:, p] predicts token p+1
  return logits.narrow(1, answer_start - 1, T - answer_start);   // (B, A, V+2)
}

torch::Tensor DecoderImpl::begin_decoding(const torch::Tensor& prompt, KVCache& cache) {
  cache = KVCache{};
  return prompt;  // (B, P)
}

torch::Tensor DecoderImpl::decode(const torch::Tensor& tokens, KVCache& cache, const torch::Tensor& task_positions) {
  const int64_t n = tokens.size(1), end = cache.length + n;
  const auto ids = id_range(cache.length, end, tokens);  // (n)
  if (cache.layers.empty()) cache.layers.resize(static_cast<size_t>(cfg_.layers));
  auto x = run_stack(tokens, ids, end, &cache, {}, task_positions);  // (B, n, D)
  cache.length = end;
  return linear(head_, x);  // (B, n, V + 2)
}

torch::Tensor DecoderImpl::decode_uncached(const torch::Tensor& tokens, const KVCache&,
                                           const torch::Tensor& task_positions) {
  return forward(tokens, {}, task_positions);  // (B, n, V + 2)
}

double DecoderImpl::forward_flops(int64_t batch, int64_t length) const {
  const int64_t L = model_length(length);
  const double head = 2.0 * batch * L * cfg_.d_model * (vocab_size_ + 2);
  return stack_flops(batch, L) + head;
}

}  // namespace posenc
