// model.kind=decoder: the causal language model. tokens (B, L) -> next-token
// logits (B, L, V + 2) through causal blocks; decode() continues from a KV
// cache, one forward per new token.
#pragma once

#include "posenc/model/transformer.h"

namespace posenc {

class DecoderImpl : public TransformerImpl, public NextTokenModel {
 public:
  DecoderImpl(const ModelConfig& cfg, int64_t vocab_size);

  /// tokens (B, L) -> next-token logits (B, L, V + 2), causal. Position ids
  /// default to 0..L-1; `ids`, when given, replaces them: L sorted int64 ids on
  /// the CPU (randomized positions in training). `task_positions` (B, L) int64,
  /// on the CPU: the ids a task defines per token (TaskBatch::positions), read by
  /// the embedding scheme (attention keeps counting 0..L-1).
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& ids = {},
                        const torch::Tensor& task_positions = {});

  NextTokenModel* next_token() override { return this; }
  torch::Tensor answer_logits(const torch::Tensor& tokens, int64_t answer_start, const torch::Tensor& ids = {},
                              const torch::Tensor& task_positions = {}) override;
  torch::Tensor begin_decoding(const torch::Tensor& prompt, KVCache& cache) override;
  torch::Tensor decode(const torch::Tensor& tokens, KVCache& cache, const torch::Tensor& task_positions = {}) override;
  torch::Tensor decode_uncached(const torch::Tensor& tokens, const KVCache& cache,
                                const torch::Tensor& task_positions = {}) override;

  int64_t model_length(int64_t tokens) const override { return tokens - 1; }
  double forward_flops(int64_t batch, int64_t length) const override;
};
TORCH_MODULE(Decoder);

}  // namespace posenc
