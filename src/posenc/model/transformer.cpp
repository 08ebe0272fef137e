#include "posenc/model/transformer.h"
#include "posenc/compat.h"
#include "posenc/util/linear.h"

namespace posenc {

BlockImpl::BlockImpl(const ModelConfig& cfg, bool project_input) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.d_model})));
  attention = register_module("attention", MultiHeadAttention(cfg.d_model, cfg.heads, cfg.dropout, project_input,
                                                              /*causal=*/cfg.kind == "decoder"));
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

namespace {

std::vector<int64_t> applied_layers(const ModelConfig& cfg, const SchemeInfo& info) {
  std::string where = cfg.positional.apply_to;
  if (where == "auto") where = info.default_placement == Placement::Input ? "input" : "every_layer";
  std::vector<int64_t> layers;
  const int64_t n = where == "input" ? 1 : cfg.layers;
  for (int64_t i = 0; i < n; ++i) layers.push_back(i);
  return layers;
}

}  // namespace

TransformerImpl::TransformerImpl(const ModelConfig& cfg, int64_t vocab_size) : cfg_(cfg), vocab_size_(vocab_size) {
  const bool embedded = cfg.qkv == "embedded";
  const int64_t D = cfg.d_model;
  // Ids 0 (padding) .. vocab_size + 1 (CLS).
  tokens_ = register_module("tokens", torch::nn::Embedding(vocab_size + 2, embedded ? 3 * D : D));
  embed_drop_ = register_module("embed_drop", torch::nn::Dropout(cfg.dropout));

  // Positional scheme instances and where each acts; decided once, here.
  const SchemeInfo& info = find_scheme(cfg.positional.type);
  const SchemeOptions options(cfg.positional.options);
  embed_at_.assign(cfg.layers, nullptr);
  attend_with_.assign(cfg.layers, nullptr);
  for (int64_t layer : applied_layers(cfg, info)) {
    if (schemes_.empty() || !cfg.positional.share_across_layers) {
      SchemeContext ctx{D, cfg.heads, D / cfg.heads, layer, /*causal=*/cfg.kind == "decoder"};
      schemes_.push_back(info.make(ctx, options));
      register_module("positional" + (cfg.positional.share_across_layers ? "" : std::to_string(layer)),
                      schemes_.back());
    }
    PositionalSchemeImpl* s = schemes_.back().get();
    const Capabilities caps = s->capabilities();
    if (caps.embed) embed_at_[layer] = s;
    if (caps.acts_in_attention()) attend_with_[layer] = s;
  }
  if (embedded && embed_at_[0] != nullptr)
    throw IncompatibleConfig(
        "model.positional.type=" + cfg.positional.type +
        " adds positions to the residual stream before block 1, but model.attention.qkv=embedded "
        "reads block 1's q, k, v straight from the token table, so there is nothing to add them to; "
        "use model.attention.qkv=projected or a scheme that acts in attention");

  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.layers; ++i) {
    block_refs_.push_back(Block(cfg, /*project_input=*/!(embedded && i == 0)));
    blocks_->push_back(block_refs_.back());
  }
  final_ln_ = register_module("final_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
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
                                      KVCache* cache) {
  ForwardCache memo;
  // Queries at `ids`; keys at every position so far (the cached ones and these).
  const torch::Tensor keys =
      cache && cache->length > 0
          ? torch::arange(end, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()))
          : ids;
  const Positions pos{ids, keys, end, &memo};
  auto x = embed_drop_->forward(tokens_->forward(tokens));  // (B, L, D) or (B, L, 3D) for embedded QKV
  for (int64_t i = 0; i < cfg_.layers; ++i) {
    LayerCache* layer_cache = cache ? &cache->layers[static_cast<size_t>(i)] : nullptr;
    if (i == 0 && cfg_.qkv == "embedded") {
      auto qkv = x.chunk(3, /*dim=*/-1);  // 3 x (B, L, D)
      x = block_refs_[0]->forward_qkv(qkv[0], qkv[1], qkv[2], attend_with_[0], pos, layer_cache);
      continue;
    }
    if (embed_at_[i]) x = embed_at_[i]->embed(x, pos);
    x = block_refs_[i]->forward(x, attend_with_[i], pos, layer_cache);
  }
  return final_ln_->forward(x);  // (B, L, D)
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens_in, const torch::Tensor& given_ids) {
  auto tokens = tokens_in;  // (B, L)
  if (!is_decoder() && cfg_.pooling == "cls") {
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
  auto x = hidden(tokens, ids, end, nullptr);  // (B, L, D)
  if (is_decoder()) return linear(head_, x);   // (B, L, V + 2)
  torch::Tensor pooled;                        // (B, D)
  if (cfg_.pooling == "cls")
    pooled = x.select(1, 0);
  else if (cfg_.pooling == "mean")
    pooled = x.mean(1);
  else
    pooled = std::get<0>(x.max(1));
  return linear(head_, pooled);  // (B, 2)
}

torch::Tensor TransformerImpl::decode(const torch::Tensor& tokens, KVCache& cache) {
  TORCH_CHECK(is_decoder(), "decode() needs model.kind=decoder");
  if (cache.layers.empty()) cache.layers.resize(static_cast<size_t>(cfg_.layers));
  const int64_t n = tokens.size(1), end = cache.length + n;
  auto ids = torch::arange(cache.length, end, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  auto x = hidden(tokens, ids, end, &cache);  // (B, n, D)
  cache.length = end;
  return linear(head_, x);  // (B, n, V + 2)
}

bool TransformerImpl::supports_kv_cache() const {
  for (const auto& s : schemes_)
    if (!s->supports_kv_cache()) return false;
  return true;
}

double TransformerImpl::forward_flops(int64_t batch, int64_t length) const {
  const double B = batch, L = static_cast<double>(model_length(length)), D = cfg_.d_model, F = cfg_.d_ff;
  const int64_t H = cfg_.heads, Dh = cfg_.d_model / cfg_.heads;
  double flops = 0;
  for (int64_t i = 0; i < cfg_.layers; ++i) {
    if (embed_at_[i]) flops += embed_at_[i]->embed_flops(batch, model_length(length), cfg_.d_model);
    if (!(i == 0 && cfg_.qkv == "embedded")) flops += 2 * B * L * D * 3 * D;  // W_qkv
    flops += 2 * 2 * B * L * L * D;                                           // q·k and p·v over all heads
    if (attend_with_[i])
      flops += attend_with_[i]->attention_flops(batch, H, model_length(length), model_length(length), Dh);
    flops += 2 * B * L * D * D + 2 * 2 * B * L * D * F;  // W_out and the feed-forward
  }
  return flops + (is_decoder() ? 2 * B * L * D * (vocab_size_ + 2) : 2 * B * D * 2);  // head
}

void TransformerImpl::check_length(int64_t tokens) const {
  const int64_t needed = model_length(tokens);
  for (const auto& s : schemes_)
    if (s->max_positions() > 0 && needed > s->max_positions())
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

void TransformerImpl::keep_attention(bool keep) {
  for (auto& b : block_refs_) b->attention->keep_weights(keep);
}

std::vector<torch::Tensor> TransformerImpl::attention_maps() const {
  std::vector<torch::Tensor> maps;
  for (const auto& b : block_refs_) maps.push_back(b->attention->last_weights());
  return maps;
}

void TransformerImpl::force_explicit_attention(bool on) {
  for (auto& b : block_refs_) b->attention->force_explicit(on);
}

bool TransformerImpl::fuses_attention() const {
  if (!compat::kHasSdpa) return false;
  for (const auto& b : block_refs_)
    if (b->attention->explicit_forced() || b->attention->keeps_weights()) return false;
  for (const auto* s : attend_with_)
    if (s != nullptr && !s->capabilities().fits_fused_attention()) return false;
  return true;
}

}  // namespace posenc
