#include "posenc/model/transformer.h"
#include "posenc/compat.h"
#include "posenc/util/linear.h"

namespace posenc {

BlockImpl::BlockImpl(const ModelConfig& cfg, bool project_input) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.d_model})));
  attention = register_module("attention", MultiHeadAttention(cfg.d_model, cfg.heads, cfg.dropout, project_input,
                                                              /*causal=*/cfg.kind == ModelKind::Decoder));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.d_model})));
  ff1_ = register_module("ff1", torch::nn::Linear(cfg.d_model, cfg.d_ff));
  ff2_ = register_module("ff2", torch::nn::Linear(cfg.d_ff, cfg.d_model));
  drop_ = register_module("drop", torch::nn::Dropout(cfg.dropout));
}

torch::Tensor BlockImpl::feed_forward(const torch::Tensor& h) {
  return h + drop_->forward(linear(ff2_, torch::gelu(linear(ff1_, ln2_->forward(h)))));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, PositionalSchemeImpl* scheme, const Positions& pos,
                                 LayerCache* cache) {
  auto h = x + drop_->forward(attention->forward(ln1_->forward(x), scheme, pos, cache));  // (B, L, D)
  return feed_forward(h);
}

torch::Tensor BlockImpl::forward_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     PositionalSchemeImpl* scheme, const Positions& pos, LayerCache* cache) {
  auto h = v + drop_->forward(attention->attend(q, k, v, scheme, pos, cache));  // (B, L, D)
  return feed_forward(h);
}

DecoderBlockImpl::DecoderBlockImpl(const ModelConfig& cfg) {
  const int64_t D = cfg.d_model;
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  self_attention = register_module("attention", MultiHeadAttention(D, cfg.heads, cfg.dropout, /*project_input=*/true,
                                                                   /*causal=*/true));
  ln_cross_ = register_module("ln_cross", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  cross_q_ = register_module("cross_q", torch::nn::Linear(D, D));
  cross_kv_ = register_module("cross_kv", torch::nn::Linear(D, 2 * D));
  cross_attention = register_module(
      "cross_attention", MultiHeadAttention(D, cfg.heads, cfg.dropout, /*project_input=*/false, /*causal=*/false));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  ff1_ = register_module("ff1", torch::nn::Linear(D, cfg.d_ff));
  ff2_ = register_module("ff2", torch::nn::Linear(cfg.d_ff, D));
  drop_ = register_module("drop", torch::nn::Dropout(cfg.dropout));
}

LayerCache DecoderBlockImpl::cross_keys_values(const torch::Tensor& memory) {
  auto kv = linear(cross_kv_, memory).chunk(2, /*dim=*/-1);  // 2 x (B, S, D)
  return {kv[0], kv[1]};
}

torch::Tensor DecoderBlockImpl::forward(const torch::Tensor& x, PositionalSchemeImpl* scheme, const Positions& pos,
                                        LayerCache* cache, const LayerCache& cross, PositionalSchemeImpl* cross_scheme,
                                        const Positions& cross_pos) {
  auto h = x + drop_->forward(self_attention->forward(ln1_->forward(x), scheme, pos, cache));  // (B, A, D)
  auto q = linear(cross_q_, ln_cross_->forward(h));                                            // (B, A, D)
  h = h + drop_->forward(cross_attention->attend(q, cross.k, cross.v, cross_scheme, cross_pos));
  return h + drop_->forward(linear(ff2_, torch::gelu(linear(ff1_, ln2_->forward(h)))));
}

SchemePlacement TransformerImpl::place_scheme(const std::string& type, const nlohmann::json& options_json,
                                              int64_t layers, bool causal, const std::string& prefix,
                                              ApplyTo apply_to) {
  SchemePlacement placed;
  placed.embed_at.assign(layers, nullptr);
  placed.attend_with.assign(layers, nullptr);
  const SchemeInfo& info = find_scheme(type);
  const SchemeOptions options(options_json);
  ApplyTo where = apply_to;
  if (where == ApplyTo::Auto) where = info.default_placement == Placement::Input ? ApplyTo::Input : ApplyTo::EveryLayer;
  const int64_t applied = where == ApplyTo::Input ? 1 : layers;
  PositionalSchemeImpl* shared = nullptr;
  for (int64_t layer = 0; layer < applied; ++layer) {
    if (shared == nullptr || !cfg_.positional.share_across_layers) {
      SchemeContext ctx{cfg_.d_model, cfg_.heads, cfg_.d_model / cfg_.heads, layer, causal};
      schemes_.push_back(info.make(ctx, options));
      register_module(prefix + "positional" + (cfg_.positional.share_across_layers ? "" : std::to_string(layer)),
                      schemes_.back());
      shared = schemes_.back().get();
    }
    const Capabilities caps = shared->capabilities();
    if (caps.embed) placed.embed_at[layer] = shared;
    if (caps.acts_in_attention()) placed.attend_with[layer] = shared;
  }
  return placed;
}

TransformerImpl::TransformerImpl(const ModelConfig& cfg, int64_t vocab_size) : cfg_(cfg), vocab_size_(vocab_size) {
  const bool embedded = cfg.qkv == Qkv::Embedded;
  const int64_t D = cfg.d_model;
  // Ids 0 (padding) .. vocab_size + 1 (CLS).
  if (cfg.token_embedding == TokenEmbedding::Numeric)
    numeric_tokens_ = register_module("numeric_tokens", NumericEmbedding(vocab_size, D));
  else
    tokens_ = register_module("tokens", torch::nn::Embedding(vocab_size + 2, embedded ? 3 * D : D));
  if (cfg.kind == ModelKind::Encoder && cfg.pooling == Pooling::Lse)
    log_temperature_ = register_parameter("pool_log_temperature", torch::zeros({D}));  // tau = 1 at the start
  embed_drop_ = register_module("embed_drop", torch::nn::Dropout(cfg.dropout));

  // Positional scheme instances and where each acts; decided once, here.
  {
    const SchemePlacement placed = place_scheme(cfg.positional.type, cfg.positional.options, cfg.layers,
                                                cfg.kind == ModelKind::Decoder, "", cfg.positional.apply_to);
    embed_at_ = placed.embed_at;
    attend_with_ = placed.attend_with;
  }
  // model.positional.input: a second scheme, before block 1, beside one in attention.
  if (cfg.positional.input != "none") {
    const SchemePlacement input = place_scheme(cfg.positional.input, cfg.positional.input_options, cfg.layers,
                                               cfg.kind == ModelKind::Decoder, "input_", ApplyTo::Input);
    input_scheme_ = input.embed_at[0];
    if (input_scheme_ == nullptr || input.attend_with[0] != nullptr)
      throw IncompatibleConfig("model.positional.input=" + cfg.positional.input +
                               " does not only add positions to the residual stream; the input slot holds one that "
                               "does (learned, sinusoidal, ...)");
    for (const auto* e : embed_at_)
      if (e != nullptr)
        throw IncompatibleConfig("model.positional.input=" + cfg.positional.input +
                                 " with model.positional.type=" + cfg.positional.type +
                                 ": both add positions to the residual stream; pair the input scheme with one "
                                 "that acts in attention");
  }
  if (is_encoder_decoder()) {
    // The decoder's own instances, with the causal value of any option that has one.
    const SchemeInfo& info = find_scheme(cfg.positional.type);
    decoder_schemes_ = place_scheme(cfg.positional.type, causal_scheme_options(info, cfg.positional.options),
                                    cfg.decoder_layers, /*causal=*/true, "decoder_", cfg.positional.apply_to);
    // Cross-attention: in every decoder block, queries at target ids, keys at source ids.
    cross_schemes_.attend_with.assign(cfg.decoder_layers, nullptr);
    if (cfg.positional.cross != "none")
      cross_schemes_ = place_scheme(cfg.positional.cross, cfg.positional.cross_options, cfg.decoder_layers,
                                    /*causal=*/false, "cross_", ApplyTo::EveryLayer);
    if (cfg.positional.cross != "none" && cross_schemes_.attend_with[0] == nullptr)
      throw IncompatibleConfig("model.positional.cross=" + cfg.positional.cross +
                               " adds positions to the residual stream before a block, but cross-attention reads "
                               "the encoder's output as it is: there is nothing for it to act on; choose a scheme "
                               "that acts in attention (rope, t5, alibi, ...) or none");
  }
  if (embedded && (embed_at_[0] != nullptr || input_scheme_ != nullptr))
    throw IncompatibleConfig(
        "model.positional." +
        std::string(input_scheme_ ? "input=" + cfg.positional.input : "type=" + cfg.positional.type) +
        " adds positions to the residual stream before block 1, but model.attention.qkv=embedded "
        "reads block 1's q, k, v straight from the token table, so there is nothing to add them to; "
        "use model.attention.qkv=projected or a scheme that acts in attention");

  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.layers; ++i) {
    block_refs_.push_back(Block(cfg, /*project_input=*/!(embedded && i == 0)));
    blocks_->push_back(block_refs_.back());
  }
  final_ln_ = register_module("final_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  if (is_encoder_decoder()) {
    auto decoder_blocks = register_module("decoder_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < cfg.decoder_layers; ++i) {
      decoder_refs_.push_back(DecoderBlock(cfg));
      decoder_blocks->push_back(decoder_refs_.back());
    }
    decoder_final_ln_ = register_module("decoder_final_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  }
  // The encoder classifies (2 classes); the decoder predicts the next token id.
  head_ = register_module("head", torch::nn::Linear(D, is_decoder() ? vocab_size + 2 : 2));
  const int64_t randomized = cfg.positional.randomize_max_position;
  for (const auto& s : schemes_)
    if (randomized > 0 && s->max_positions() > 0 && randomized > s->max_positions())
      throw ConfigError("model.positional.randomize.max_position=" + std::to_string(randomized) +
                        " draws positions the scheme cannot encode: model.positional.type=" + cfg.positional.type +
                        " holds " + std::to_string(s->max_positions()) +
                        " (model.positional.max_positions); raise it or lower max_position");
}

torch::Tensor TransformerImpl::hidden(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end,
                                      KVCache* cache, const torch::Tensor& padding,
                                      const torch::Tensor& task_positions) {
  ForwardCache memo;
  // Queries at `ids`; keys at every position so far (the cached ones and these).
  const torch::Tensor keys =
      cache && cache->length > 0
          ? torch::arange(end, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()))
          : ids;
  Positions pos{ids, keys, end, &memo, padding};
  // A task's own ids (B, L) go to the embedding scheme (the input slot's, where
  // model.positional.input holds one), and, with no input slot or with
  // model.positional.task_ids "both", to the scheme in attention, whose causal
  // mask still counts as above.
  Positions embed_pos = pos;
  if (task_positions.defined()) {
    TORCH_CHECK(task_positions.device().is_cpu() && task_positions.dim() == 2 &&
                    task_positions.size(0) == tokens.size(0) && task_positions.size(1) == tokens.size(1),
                "task positions: expected (", tokens.size(0), ", ", tokens.size(1), ") ids on the CPU, got ",
                task_positions.sizes());
    const int64_t task_end = task_positions.numel() ? task_positions.max().item<int64_t>() + 1 : 0;  // a CPU read
    embed_pos.q = embed_pos.k = task_positions.to(tokens.device());
    embed_pos.end = task_end;
    if (input_scheme_ == nullptr || cfg_.positional.task_ids == TaskIds::Both) {
      pos.task_q = embed_pos.q;  // (B, L)
      pos.task_k = pos.task_q;
      pos.task_end = task_end;
      if (cache) {  // keys: the cached tokens' ids, then these
        cache->task_keys = cache->length > 0 ? torch::cat({cache->task_keys, pos.task_q}, 1) : pos.task_q;
        pos.task_k = cache->task_keys;  // (B, end)
        cache->task_end = pos.task_end = std::max(cache->length > 0 ? cache->task_end : 0, task_end);
      }
    }
  }
  auto x = embed_drop_->forward(embed_tokens(tokens));  // (B, L, D) or (B, L, 3D) for embedded QKV
  if (input_scheme_ != nullptr) x = input_scheme_->embed(x, embed_pos);
  const Positions& block_embed_pos = input_scheme_ != nullptr ? pos : embed_pos;
  for (int64_t i = 0; i < cfg_.layers; ++i) {
    LayerCache* layer_cache = cache ? &cache->layers[static_cast<size_t>(i)] : nullptr;
    if (i == 0 && cfg_.qkv == Qkv::Embedded) {
      auto qkv = x.chunk(3, /*dim=*/-1);  // 3 x (B, L, D)
      x = block_refs_[0]->forward_qkv(qkv[0], qkv[1], qkv[2], attend_with_[0], pos, layer_cache);
      continue;
    }
    if (embed_at_[i]) x = embed_at_[i]->embed(x, block_embed_pos);
    x = block_refs_[i]->forward(x, attend_with_[i], pos, layer_cache);
  }
  return final_ln_->forward(x);  // (B, L, D)
}

namespace {
torch::Tensor arange_on(int64_t begin, int64_t end, const torch::Tensor& like) {
  return torch::arange(begin, end, torch::TensorOptions().dtype(torch::kLong).device(like.device()));
}
}  // namespace

EncoderMemory TransformerImpl::encode(const torch::Tensor& source) {
  TORCH_CHECK(is_encoder_decoder(), "encode() needs model.kind=encoder_decoder");
  const int64_t S = source.size(1);
  EncoderMemory memory;
  memory.padding = source.eq(0);  // (B, S)
  memory.length = S;
  memory.states = hidden(source, arange_on(0, S, source), S, nullptr, memory.padding);  // (B, S, D)
  return memory;
}

torch::Tensor TransformerImpl::decoder_hidden(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end,
                                              KVCache& cache) {
  ForwardCache memo, cross_memo;
  const bool cached = !cache.layers.empty();
  const Positions pos{ids, cached ? arange_on(0, end, tokens) : ids, end, &memo};
  const int64_t S = cache.memory.length;
  const Positions cross_pos{ids, arange_on(0, S, tokens), std::max(end, S), &cross_memo, cache.memory.padding};
  auto x = embed_drop_->forward(embed_tokens(tokens));  // (B, n, D)
  for (size_t i = 0; i < decoder_refs_.size(); ++i) {
    if (decoder_schemes_.embed_at[i]) x = decoder_schemes_.embed_at[i]->embed(x, pos);
    x = decoder_refs_[i]->forward(x, decoder_schemes_.attend_with[i], pos, cached ? &cache.layers[i] : nullptr,
                                  cache.cross[i], cross_schemes_.attend_with[i], cross_pos);
  }
  return decoder_final_ln_->forward(x);  // (B, n, D)
}

void TransformerImpl::start_decoding(const torch::Tensor& source, KVCache& cache) {
  cache = KVCache{};
  cache.memory = encode(source);
  for (auto& block : decoder_refs_) cache.cross.push_back(block->cross_keys_values(cache.memory.states));
  cache.layers.resize(decoder_refs_.size());
}

torch::Tensor TransformerImpl::decode_target(const torch::Tensor& target, const EncoderMemory& memory) {
  KVCache uncached;  // cross keys and values only: the target is attended whole
  uncached.memory = memory;
  for (auto& block : decoder_refs_) uncached.cross.push_back(block->cross_keys_values(memory.states));
  const int64_t A = target.size(1);
  return linear(head_, decoder_hidden(target, arange_on(0, A, target), A, uncached));  // (B, A, V + 2)
}

torch::Tensor TransformerImpl::encoder_decoder_forward(const torch::Tensor& source, const torch::Tensor& target) {
  return decode_target(target, encode(source));  // (B, A, V + 2)
}

void TransformerImpl::select_cache_rows(KVCache& cache, const torch::Tensor& rows) {
  const auto pick = [&](torch::Tensor& t) {
    if (t.defined()) t = t.index_select(0, rows);
  };
  for (auto& layer : cache.layers) pick(layer.k), pick(layer.v);
  for (auto& layer : cache.cross) pick(layer.k), pick(layer.v);
  pick(cache.task_keys);
  pick(cache.memory.states);
  pick(cache.memory.padding);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens_in, const torch::Tensor& given_ids,
                                       const torch::Tensor& task_positions) {
  TORCH_CHECK(!is_encoder_decoder(), "an encoder_decoder reads a source and a target: call encoder_decoder_forward()");
  auto tokens = tokens_in;  // (B, L)
  if (!is_decoder() && cfg_.pooling == Pooling::Cls) {
    auto cls = torch::full({tokens.size(0), 1}, cls_token(), tokens.options());
    tokens = torch::cat({cls, tokens}, /*dim=*/1);  // (B, L+1)
  }
  const int64_t L = tokens.size(1);
  torch::Tensor ids;  // (L)
  int64_t end = L;    // one past the largest id, known on the host
  if (given_ids.defined()) {
    TORCH_CHECK(given_ids.device().is_cpu() && given_ids.dim() == 1 && given_ids.size(0) == L,
                "position ids: expected ", L, " ids on the CPU, got ", given_ids.sizes());
    end = given_ids[L - 1].item<int64_t>() + 1;  // sorted; a CPU read, no device sync
    ids = given_ids.to(tokens.device());
  } else {
    ids = torch::arange(L, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  }
  TORCH_CHECK(!task_positions.defined() || cfg_.kind == ModelKind::Decoder,
              "task-defined positions need model.kind=decoder");
  auto x = hidden(tokens, ids, end, nullptr, {}, task_positions);  // (B, L, D)
  if (is_decoder()) return linear(head_, x);                       // (B, L, V + 2)
  return linear(head_, pool(x));                                   // (B, 2)
}

torch::Tensor TransformerImpl::embed_tokens(const torch::Tensor& tokens) {
  return numeric_tokens_ ? numeric_tokens_->forward(tokens) : tokens_->forward(tokens);
}

torch::Tensor TransformerImpl::pool(const torch::Tensor& x) const {
  if (cfg_.pooling == Pooling::Cls) return x.select(1, 0);  // (B, D)
  if (cfg_.pooling == Pooling::Mean) return x.mean(1);
  if (cfg_.pooling == Pooling::Lse) {
    // tau * log(mean_i exp(x_i / tau)) per feature: mean as tau -> inf, max as tau -> 0.
    const auto tau = log_temperature_.exp();  // (D)
    return tau * (torch::logsumexp(x / tau, /*dim=*/1) - std::log(static_cast<double>(x.size(1))));
  }
  return std::get<0>(x.max(1));
}

std::pair<torch::Tensor, torch::Tensor> TransformerImpl::classify_positions(const torch::Tensor& tokens) {
  TORCH_CHECK(!is_decoder() && cfg_.pooling != Pooling::Cls,
              "classify_positions() needs an encoder that pools every position (max, mean or lse)");
  const int64_t L = tokens.size(1);
  auto x = hidden(tokens, arange_on(0, L, tokens), L, nullptr);  // (B, L, D)
  return {linear(head_, pool(x)), linear(head_, x)};             // (B, 2), (B, L, 2)
}

torch::Tensor TransformerImpl::decode(const torch::Tensor& tokens, KVCache& cache,
                                      const torch::Tensor& task_positions) {
  TORCH_CHECK(is_decoder(), "decode() needs model.kind=decoder or encoder_decoder");
  TORCH_CHECK(!task_positions.defined() || !is_encoder_decoder(), "task-defined positions need model.kind=decoder");
  const int64_t n = tokens.size(1), end = cache.length + n;
  auto ids = arange_on(cache.length, end, tokens);
  torch::Tensor x;  // (B, n, D)
  if (is_encoder_decoder()) {
    TORCH_CHECK(!cache.cross.empty(), "call start_decoding(source, cache) before decode()");
    x = decoder_hidden(tokens, ids, end, cache);
  } else {
    if (cache.layers.empty()) cache.layers.resize(static_cast<size_t>(cfg_.layers));
    x = hidden(tokens, ids, end, &cache, {}, task_positions);
  }
  cache.length = end;
  return linear(head_, x);  // (B, n, V + 2)
}

bool TransformerImpl::supports_kv_cache() const {
  for (const auto& s : schemes_)
    if (!s->supports_kv_cache()) return false;
  return true;
}

bool TransformerImpl::capturable() const {
  for (const auto& s : schemes_)
    if (!s->capturable()) return false;
  return true;
}

double TransformerImpl::forward_flops(int64_t batch, int64_t length) const {
  const double B = batch, D = cfg_.d_model, F = cfg_.d_ff;
  const int64_t H = cfg_.heads, Dh = cfg_.d_model / cfg_.heads;
  // Self-attention blocks over L positions: projections, q·k and p·v, the scheme, W_out, the feed-forward.
  const auto blocks = [&](const SchemePlacement& at, int64_t n, int64_t length_in) {
    const double L = static_cast<double>(length_in);
    double flops = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (at.embed_at[i]) flops += at.embed_at[i]->embed_flops(batch, length_in, cfg_.d_model);
      if (!(i == 0 && cfg_.qkv == Qkv::Embedded)) flops += 2 * B * L * D * 3 * D;  // W_qkv
      flops += 2 * 2 * B * L * L * D;                                              // q·k and p·v over all heads
      if (at.attend_with[i]) flops += at.attend_with[i]->attention_flops(batch, H, length_in, length_in, Dh);
      flops += 2 * B * L * D * D + 2 * 2 * B * L * D * F;  // W_out and the feed-forward
    }
    return flops;
  };
  const int64_t L = model_length(length);
  const double input_flops = input_scheme_ ? input_scheme_->embed_flops(batch, L, cfg_.d_model) : 0.0;
  if (!is_encoder_decoder())
    return input_flops + blocks({embed_at_, attend_with_}, cfg_.layers, L) +
           (is_decoder() ? 2 * B * L * D * (vocab_size_ + 2) : 2 * B * D * 2);  // head
  // An `x SEP y` row of `length` tokens, counted as a source and a target of half its positions each.
  const int64_t S = L / 2, A = L - S;
  double flops = blocks({embed_at_, attend_with_}, cfg_.layers, S) + blocks(decoder_schemes_, cfg_.decoder_layers, A);
  for (int64_t i = 0; i < cfg_.decoder_layers; ++i) {  // cross-attention: W_q, W_kv, q·k and p·v, W_out
    flops += 2 * B * A * D * D + 2 * B * S * D * 2 * D + 2 * 2 * B * A * S * D + 2 * B * A * D * D;
    if (cross_schemes_.attend_with[i]) flops += cross_schemes_.attend_with[i]->attention_flops(batch, H, A, S, Dh);
  }
  return flops + 2 * B * A * D * (vocab_size_ + 2);
}

void TransformerImpl::check_length(int64_t tokens, bool task_positions) const {
  const int64_t needed = model_length(tokens);
  for (const auto& s : schemes_)
    if (s->max_positions() > 0 && needed > s->max_positions() && !(task_positions && s->capabilities().embed))
      throw ConfigError("an example of " + std::to_string(tokens) + " tokens needs " + std::to_string(needed) +
                        " positions but model.positional.type=" + cfg_.positional.type + " encodes at most " +
                        std::to_string(s->max_positions()) + " (model.positional.max_positions)");
}

bool TransformerImpl::has_position_table() const {
  for (const auto& s : schemes_)
    if (s->has_position_table()) return true;
  return false;
}

bool TransformerImpl::directional() const {
  for (const auto& s : schemes_)
    if (s->directional()) return true;
  return false;
}

std::vector<MultiHeadAttention> TransformerImpl::attention_modules() const {
  std::vector<MultiHeadAttention> all;
  for (const auto& b : block_refs_) all.push_back(b->attention);
  for (const auto& b : decoder_refs_) all.push_back(b->self_attention), all.push_back(b->cross_attention);
  return all;
}

void TransformerImpl::keep_attention(bool keep) {
  for (auto& a : attention_modules()) a->keep_weights(keep);
}

std::vector<torch::Tensor> TransformerImpl::attention_maps() const {
  std::vector<torch::Tensor> maps;
  for (const auto& a : attention_modules()) maps.push_back(a->last_weights());
  return maps;
}

void TransformerImpl::force_explicit_attention(bool on) {
  for (auto& a : attention_modules()) a->force_explicit(on);
}

bool TransformerImpl::fuses_attention() const {
  if (!compat::kHasSdpa) return false;
  for (const auto& a : attention_modules())
    if (a->explicit_forced() || a->keeps_weights()) return false;
  for (const auto& s : schemes_)
    if (s->capabilities().acts_in_attention() && !s->capabilities().fits_fused_attention()) return false;
  return true;
}

}  // namespace posenc
