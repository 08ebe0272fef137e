// model.kind=encoder_decoder: source (B, S), target (B, A) -> next-token
// logits (B, A, V + 2). A bidirectional encoder over the source (the shared
// stack), a causal decoder over the target whose blocks attend to the
// encoder's output (self-attention, cross-attention, feed-forward). The token
// table and the output head serve both sides; each side counts its positions
// from 0. A task's row `x SEP y` is read as source x, target SEP y.
#pragma once

#include "posenc/model/transformer.h"

namespace posenc {

class EncoderDecoderImpl : public TransformerImpl, public NextTokenModel {
 public:
  EncoderDecoderImpl(const ModelConfig& cfg, int64_t vocab_size);

  /// source (B, S) (0 = padding, at the end of a row) and the decoder's input
  /// target (B, A) -> next-token logits (B, A, V + 2).
  torch::Tensor forward(const torch::Tensor& source, const torch::Tensor& target);
  /// source (B, S) -> the encoder's output.
  EncoderMemory encode(const torch::Tensor& source);
  /// target (B, A) over `memory`, without a cache -> (B, A, V + 2).
  torch::Tensor decode_target(const torch::Tensor& target, const EncoderMemory& memory);
  /// Encodes the source into an empty `cache` and computes every block's
  /// cross-attention keys and values, once; decode() continues the target.
  void start_decoding(const torch::Tensor& source, KVCache& cache);

  NextTokenModel* next_token() override { return this; }
  /// Rows `x SEP y` (B, T): source x = tokens[:, :answer_start - 1], target SEP y[:-1].
  torch::Tensor answer_logits(const torch::Tensor& tokens, int64_t answer_start, const torch::Tensor& ids = {},
                              const torch::Tensor& task_positions = {}) override;
  torch::Tensor begin_decoding(const torch::Tensor& prompt, KVCache& cache) override;
  torch::Tensor decode(const torch::Tensor& tokens, KVCache& cache, const torch::Tensor& task_positions = {}) override;
  torch::Tensor decode_uncached(const torch::Tensor& tokens, const KVCache& cache,
                                const torch::Tensor& task_positions = {}) override;

  int64_t model_length(int64_t tokens) const override { return tokens - 1; }
  /// An `x SEP y` row of `length` tokens, counted as a source and a target of half its positions each.
  double forward_flops(int64_t batch, int64_t length) const override;

 protected:
  /// The stack's blocks, then each decoder block's self- and cross-attention.
  std::vector<MultiHeadAttention> attention_modules() const override;

 private:
  /// The decoder blocks over target tokens (B, n) at ids (n) -> (B, n, D), after
  /// its final LayerNorm; `cache` holds the cross keys and values (and, when its
  /// layers are set, the self-attention's keys and values so far).
  torch::Tensor decoder_hidden(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end, KVCache& cache);
  /// target (B, A) attended whole over `over`'s memory and cross keys and values -> (B, A, V + 2).
  torch::Tensor whole_target(const torch::Tensor& target, KVCache& over);
  /// Every decoder block's cross-attention keys and values of `memory`.
  std::vector<LayerCache> cross_keys_values(const EncoderMemory& memory);

  SchemePlacement decoder_schemes_, cross_schemes_;  // the decoder's self- and cross-attention
  std::vector<DecoderBlock> decoder_blocks_;
  torch::nn::LayerNorm decoder_final_ln_{nullptr};
};
TORCH_MODULE(EncoderDecoder);

}  // namespace posenc
