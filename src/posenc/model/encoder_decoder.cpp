#include "posenc/model/encoder_decoder.h"
#include "posenc/positional/registry.h"
#include "posenc/util/linear.h"

namespace posenc {

EncoderDecoderImpl::EncoderDecoderImpl(const ModelConfig& cfg, int64_t vocab_size) : TransformerImpl(cfg, vocab_size) {
  TORCH_CHECK(cfg.kind == ModelKind::EncoderDecoder,
              "EncoderDecoderImpl built from a config of model.kind=", name_of(cfg.kind));
  const PositionalConfig& p = cfg.positional;
  register_token_embedding();
  place_stack_schemes(/*causal=*/false);
  // The decoder's own instances, with the causal value of any option that has one.
  decoder_schemes_ = place_scheme(p.type, causal_scheme_options(find_scheme(p.type), p.options), cfg.decoder_layers,
                                  /*causal=*/true, "decoder_", p.apply_to, /*self_attention=*/true);
  if (p.with != "none")
    pair_with(decoder_schemes_, causal_scheme_options(find_scheme(p.with), p.with_options), cfg.decoder_layers,
              /*causal=*/true, "decoder_");
  // Cross-attention: in every decoder block, queries at target ids, keys at source ids.
  cross_schemes_.attend_with.assign(cfg.decoder_layers, nullptr);
  if (p.cross != "none") {
    cross_schemes_ =
        place_scheme(p.cross, p.cross_options, cfg.decoder_layers, /*causal=*/false, "cross_", ApplyTo::EveryLayer,
                     /*self_attention=*/false);
    if (cross_schemes_.attend_with[0] == nullptr)
      throw IncompatibleConfig("model.positional.cross=" + p.cross +
                               " adds positions to the residual stream before a block, but cross-attention reads "
                               "the encoder's output as it is: there is nothing for it to act on; choose a scheme "
                               "that acts in attention (rope, t5, alibi, ...) or none");
    if (cross_schemes_.attend_with[0]->self_attention_only())
      throw IncompatibleConfig("model.positional.cross=" + p.cross +
                               " relates a query to the keys of its own sequence, but cross-attention's keys are "
                               "the source's: choose a scheme of offsets (rope, t5, alibi, ...) or none");
  }
  register_stack(/*causal=*/false);
  auto blocks = register_module("decoder_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.decoder_layers; ++i) {
    decoder_blocks_.push_back(DecoderBlock(BlockOptions(cfg.d_model, cfg.heads, cfg.d_ff)
                                               .dropout(cfg.dropout)
                                               .length_factors(length_factors_of(cfg, i))
                                               .window(cfg.window_of_block(i))
                                               .qk_norm(cfg.qk_norm)
                                               .qk_norm_whole_width(cfg.qk_norm_over == QkNormOver::Width)));
    blocks->push_back(decoder_blocks_.back());
  }
  decoder_final_ln_ =
      register_module("decoder_final_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.d_model})));
  register_head(vocab_size + 2);
}

EncoderMemory EncoderDecoderImpl::encode(const torch::Tensor& source) {
  const int64_t S = source.size(1);
  EncoderMemory memory;
  memory.padding = source.eq(0);  // (B, S)
  memory.length = S;
  memory.states = run_stack(source, id_range(0, S, source), S, nullptr, memory.padding);  // (B, S, D)
  return memory;
}

std::vector<LayerCache> EncoderDecoderImpl::cross_keys_values(const EncoderMemory& memory) {
  std::vector<LayerCache> cross;
  for (auto& block : decoder_blocks_) cross.push_back(block->cross_keys_values(memory.states));
  return cross;
}

torch::Tensor EncoderDecoderImpl::decoder_hidden(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end,
                                                 KVCache& cache) {
  ForwardCache memo, cross_memo;
  const bool cached = !cache.layers.empty();
  const Positions pos{ids, cached ? id_range(0, end, tokens) : ids, end, &memo};
  const int64_t S = cache.memory.length;
  const Positions cross_pos{ids, id_range(0, S, tokens), std::max(end, S), &cross_memo, cache.memory.padding};
  auto x = embed_tokens(tokens);  // (B, n, D)
  if (keeps_hidden_states()) decoder_hidden_.clear();
  for (size_t i = 0; i < decoder_blocks_.size(); ++i) {
    if (decoder_schemes_.embed_at[i]) x = decoder_schemes_.embed_at[i]->embed(x, pos);
    if (keeps_hidden_states()) decoder_hidden_.push_back(x);  // (B, n, D): what decoder block i reads
    x = decoder_blocks_[i]->forward(x, decoder_schemes_.attend_with[i], pos, cached ? &cache.layers[i] : nullptr,
                                    cache.cross[i], cross_schemes_.attend_with[i], cross_pos);
  }
  if (keeps_hidden_states()) decoder_hidden_.push_back(x);  // (B, n, D): what the last decoder block wrote
  return decoder_final_ln_->forward(x);                     // (B, n, D)
}

void EncoderDecoderImpl::start_decoding(const torch::Tensor& source, KVCache& cache) {
  cache = KVCache{};
  cache.memory = encode(source);
  cache.cross = cross_keys_values(cache.memory);
  cache.layers.resize(decoder_blocks_.size());
}

torch::Tensor EncoderDecoderImpl::decode_target(const torch::Tensor& target, const EncoderMemory& memory) {
  KVCache over;  // cross keys and values only: the target is attended whole
  over.memory = memory;
  over.cross = cross_keys_values(memory);
  return whole_target(target, over);  // (B, A, V + 2)
}

torch::Tensor EncoderDecoderImpl::whole_target(const torch::Tensor& target, KVCache& over) {
  const int64_t A = target.size(1);
  return linear(head_, decoder_hidden(target, id_range(0, A, target), A, over));  // (B, A, V + 2)
}

torch::Tensor EncoderDecoderImpl::forward(const torch::Tensor& source, const torch::Tensor& target) {
  return decode_target(target, encode(source));  // (B, A, V + 2)
}

torch::Tensor EncoderDecoderImpl::answer_logits(const torch::Tensor& tokens, int64_t answer_start,
                                                const torch::Tensor& ids, const torch::Tensor& task_positions) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(answer_start >= 2 && answer_start < T,
              "an encoder_decoder needs a source before SEP and an answer: "
              "answer_start ",
              answer_start, " outside [2, ", T, ")");
  TORCH_CHECK(!ids.defined() && !task_positions.defined(),
              "an encoder_decoder counts each side's positions from 0: no position ids to give");
  // Source x = tokens[:, :a-1]; the decoder reads SEP y[:-1] = tokens[:, a-1:T-1].
  return forward(tokens.narrow(1, 0, answer_start - 1),
                 tokens.narrow(1, answer_start - 1, T - answer_start));  // (B, A, V+2)
}

torch::Tensor EncoderDecoderImpl::begin_decoding(const torch::Tensor& prompt, KVCache& cache) {
  const int64_t P = prompt.size(1);
  TORCH_CHECK(P >= 2, "an encoder_decoder's prompt is a source and SEP");
  start_decoding(prompt.narrow(1, 0, P - 1), cache);
  return prompt.narrow(1, P - 1, 1);  // (B, 1): SEP starts the target
}

torch::Tensor EncoderDecoderImpl::decode(const torch::Tensor& tokens, KVCache& cache,
                                         const torch::Tensor& task_positions) {
  TORCH_CHECK(!task_positions.defined(), "task-defined positions need model.kind=decoder");
  TORCH_CHECK(!cache.cross.empty(), "call start_decoding(source, cache) before decode()");
  const int64_t n = tokens.size(1), end = cache.length + n;
  auto x = decoder_hidden(tokens, id_range(cache.length, end, tokens), end, cache);  // (B, n, D)
  cache.length = end;
  return linear(head_, x);  // (B, n, V + 2)
}

torch::Tensor EncoderDecoderImpl::decode_uncached(const torch::Tensor& tokens, const KVCache& cache,
                                                  const torch::Tensor& task_positions) {
  TORCH_CHECK(!task_positions.defined(), "task-defined positions need model.kind=decoder");
  TORCH_CHECK(!cache.cross.empty(), "call start_decoding(source, cache) before decode_uncached()");
  KVCache over;  // the memory and its cross keys and values, computed once by start_decoding
  over.memory = cache.memory;
  over.cross = cache.cross;
  return whole_target(tokens, over);  // (B, n, V + 2)
}

double EncoderDecoderImpl::forward_flops(int64_t batch, int64_t length) const {
  const double B = batch, D = cfg_.d_model;
  const int64_t H = cfg_.heads, Dh = cfg_.d_model / cfg_.heads;
  const int64_t L = model_length(length), S = L / 2, A = L - S;
  double flops = stack_flops(batch, S) + blocks_flops(decoder_schemes_, cfg_.decoder_layers, batch, A, true);
  for (int64_t i = 0; i < cfg_.decoder_layers; ++i) {  // cross-attention: W_q, W_kv, q·k and p·v, W_out
    flops += 2 * B * A * D * D + 2 * B * S * D * 2 * D + 2 * 2 * B * A * S * D + 2 * B * A * D * D;
    if (cross_schemes_.attend_with[i]) flops += cross_schemes_.attend_with[i]->attention_flops(batch, H, A, S, Dh);
  }
  return flops + 2 * B * A * D * (vocab_size_ + 2);
}

std::vector<MultiHeadAttention> EncoderDecoderImpl::attention_modules() const {
  std::vector<MultiHeadAttention> all = TransformerImpl::attention_modules();
  for (const auto& b : decoder_blocks_) all.push_back(b->self_attention), all.push_back(b->cross_attention);
  return all;
}

}  // namespace posenc
