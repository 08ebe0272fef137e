#include "posenc/model/transformer.h"
#include "posenc/compat.h"
#include "posenc/model/decoder.h"
#include "posenc/model/encoder.h"
#include "posenc/model/encoder_decoder.h"
#include "posenc/positional/registry.h"
#include "posenc/positional/scheme_pair.h"

namespace posenc {

Transformer::Transformer(const ModelConfig& cfg, int64_t vocab_size) : ModuleHolder(nullptr) {
  switch (cfg.kind) {
    case ModelKind::Encoder: *this = Transformer(Encoder(cfg, vocab_size)); return;
    case ModelKind::Decoder: *this = Transformer(Decoder(cfg, vocab_size)); return;
    case ModelKind::EncoderDecoder: *this = Transformer(EncoderDecoder(cfg, vocab_size)); return;
  }
  throw ConfigError("model.kind: no model of this kind");
}

NextTokenModel& next_token_model(Transformer& model, const std::string& what) {
  NextTokenModel* next = model->next_token();
  if (next == nullptr) throw IncompatibleConfig(what + " needs model.kind=decoder or encoder_decoder");
  return *next;
}

void select_cache_rows(KVCache& cache, const torch::Tensor& rows) {
  const auto pick = [&](torch::Tensor& t) {
    if (t.defined()) t = t.index_select(0, rows);
  };
  for (auto& layer : cache.layers) layer.select_rows(rows);
  for (auto& layer : cache.cross) layer.select_rows(rows);
  pick(cache.task_keys);
  pick(cache.memory.states);
  pick(cache.memory.padding);
}

TransformerImpl::TransformerImpl(const ModelConfig& cfg, int64_t vocab_size) : cfg_(cfg), vocab_size_(vocab_size) {}

void TransformerImpl::register_token_embedding() {
  const int64_t D = cfg_.d_model;
  // Ids 0 (padding) .. vocab_size + 1 (CLS or SEP).
  if (cfg_.token_embedding == TokenEmbedding::Numeric)
    numeric_tokens_ = register_module("numeric_tokens", NumericEmbedding(vocab_size_, D));
  else
    tokens_ = register_module("tokens", torch::nn::Embedding(vocab_size_ + 2, cfg_.qkv == Qkv::Embedded ? 3 * D : D));
  embed_drop_ = register_module("embed_drop", torch::nn::Dropout(cfg_.dropout));
}

SchemePlacement TransformerImpl::place_scheme(const std::string& type, const nlohmann::json& options_json,
                                              int64_t layers, bool causal, const std::string& prefix, ApplyTo apply_to,
                                              bool self_attention) {
  SchemePlacement placed;
  placed.embed_at.assign(layers, nullptr);
  placed.attend_with.assign(layers, nullptr);
  const SchemeInfo& info = find_scheme(type);
  const SchemeOptions options(options_json);
  ApplyTo where = apply_to;
  if (where == ApplyTo::Auto) where = info.default_placement == Placement::Input ? ApplyTo::Input : ApplyTo::EveryLayer;
  const int64_t applied = where == ApplyTo::Input ? 1 : layers;
  const bool shared_across_layers = cfg_.positional.share_across_layers;
  PositionalSchemeImpl* shared = nullptr;
  for (int64_t layer = 0; layer < applied; ++layer) {
    if (self_attention && cfg_.positional.nope_block(layer)) continue;  // a NoPE block: no instance, no hooks
    if (shared == nullptr || !shared_across_layers) {
      SchemeContext ctx{cfg_.d_model, cfg_.heads, cfg_.d_model / cfg_.heads, layer, causal};
      schemes_.push_back(info.make(ctx, options));
      register_module(prefix + "positional" + (shared_across_layers ? "" : std::to_string(layer)), schemes_.back());
      shared = schemes_.back().get();
    }
    const Capabilities caps = shared->capabilities();
    if (caps.embed) placed.embed_at[layer] = shared;
    if (caps.acts_in_attention()) placed.attend_with[layer] = shared;
  }
  return placed;
}

void TransformerImpl::pair_with(SchemePlacement& placed, const nlohmann::json& with_options, int64_t layers,
                                bool causal, const std::string& prefix) {
  const PositionalConfig& p = cfg_.positional;
  if (p.with == "none") return;
  // Where type acts: the same apply_to, and the blocks nope_every leaves out have neither.
  const SchemePlacement with =
      place_scheme(p.with, with_options, layers, causal, prefix + "with_", p.apply_to, /*self_attention=*/true);
  PositionalSchemeImpl *last_type = nullptr, *last_with = nullptr, *last_pair = nullptr;
  for (size_t i = 0; i < placed.attend_with.size(); ++i) {
    PositionalSchemeImpl* type = placed.attend_with[i];
    if (type == nullptr || with.attend_with[i] == nullptr) continue;
    if (type != last_type || with.attend_with[i] != last_with) {  // shared instances share one pair
      pairs_.push_back(pair_schemes(type, with.attend_with[i], p.type, p.with));
      last_type = type;
      last_with = with.attend_with[i];
      last_pair = pairs_.back().get();
      parts_of_pair_[last_pair] = {type, last_with};
    }
    placed.attend_with[i] = last_pair;
  }
}

PositionalSchemeImpl* TransformerImpl::scheme_at_block(int64_t block) const {
  if (block < 1 || block > static_cast<int64_t>(stack_schemes_.attend_with.size())) return nullptr;
  PositionalSchemeImpl* in_attention = stack_schemes_.attend_with[block - 1];
  const auto pair = parts_of_pair_.find(in_attention);
  if (pair != parts_of_pair_.end()) return pair->second.type;
  return in_attention != nullptr ? in_attention : stack_schemes_.embed_at[block - 1];
}

PositionalSchemeImpl* TransformerImpl::with_scheme_at_block(int64_t block) const {
  if (block < 1 || block > static_cast<int64_t>(stack_schemes_.attend_with.size())) return nullptr;
  const auto pair = parts_of_pair_.find(stack_schemes_.attend_with[block - 1]);
  return pair != parts_of_pair_.end() ? pair->second.with : nullptr;
}

void TransformerImpl::place_stack_schemes(bool causal) {
  const PositionalConfig& p = cfg_.positional;
  stack_schemes_ = place_scheme(p.type, p.options, cfg_.layers, causal, "", p.apply_to, /*self_attention=*/true);
  pair_with(stack_schemes_, p.with_options, cfg_.layers, causal, "");
  // model.positional.input: a second scheme, before block 1, beside one in attention.
  if (p.input != "none") {
    const SchemePlacement input =
        place_scheme(p.input, p.input_options, cfg_.layers, causal, "input_", ApplyTo::Input, /*self_attention=*/false);
    input_scheme_ = input.embed_at[0];
    if (input_scheme_ == nullptr || input.attend_with[0] != nullptr)
      throw IncompatibleConfig("model.positional.input=" + p.input +
                               " does not only add positions to the residual stream; the input slot holds one that "
                               "does (learned, sinusoidal, ...)");
    for (const auto* e : stack_schemes_.embed_at)
      if (e != nullptr)
        throw IncompatibleConfig("model.positional.input=" + p.input + " with model.positional.type=" + p.type +
                                 ": both add positions to the residual stream; pair the input scheme with one "
                                 "that acts in attention");
  }
  if (cfg_.qkv == Qkv::Embedded && (stack_schemes_.embed_at[0] != nullptr || input_scheme_ != nullptr))
    throw IncompatibleConfig(
        "model.positional." + std::string(input_scheme_ ? "input=" + p.input : "type=" + p.type) +
        " adds positions to the residual stream before block 1, but model.attention.qkv=embedded "
        "reads block 1's q, k, v straight from the token table, so there is nothing to add them to; "
        "use model.attention.qkv=projected or a scheme that acts in attention");
}

void TransformerImpl::register_stack(bool causal) {
  auto blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg_.layers; ++i) {
    blocks_.push_back(Block(BlockOptions(cfg_.d_model, cfg_.heads, cfg_.d_ff)
                                .dropout(cfg_.dropout)
                                .causal(causal)
                                .project_input(!(cfg_.qkv == Qkv::Embedded && i == 0))
                                .length_factors(length_factors_of(cfg_, i))
                                .stick_breaking(cfg_.attention_weights == AttentionWeights::StickBreaking)
                                .window(cfg_.window_of_block(i))
                                .qk_norm(cfg_.qk_norm)
                                .qk_norm_whole_width(cfg_.qk_norm_over == QkNormOver::Width)));
    blocks->push_back(blocks_.back());
  }
  final_ln_ = register_module("final_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg_.d_model})));
}

void TransformerImpl::register_head(int64_t outputs) {
  head_ = register_module("head", torch::nn::Linear(cfg_.d_model, outputs));
  const int64_t randomized = cfg_.positional.randomize_max_position;
  for (const auto& s : schemes_)
    if (randomized > 0 && s->max_positions() > 0 && randomized > s->max_positions())
      throw ConfigError("model.positional.randomize.max_position=" + std::to_string(randomized) +
                        " draws positions the scheme cannot encode: model.positional.type=" + cfg_.positional.type +
                        " holds " + std::to_string(s->max_positions()) +
                        " (model.positional.max_positions); raise it or lower max_position");
}

torch::Tensor TransformerImpl::embed_tokens(const torch::Tensor& tokens) {
  return embed_drop_->forward(numeric_tokens_ ? numeric_tokens_->forward(tokens) : tokens_->forward(tokens));
}

torch::Tensor TransformerImpl::id_range(int64_t begin, int64_t end, const torch::Tensor& like) {
  return torch::arange(begin, end, torch::TensorOptions().dtype(torch::kLong).device(like.device()));
}

torch::Tensor TransformerImpl::position_ids(const torch::Tensor& tokens, const torch::Tensor& given, int64_t* end) {
  const int64_t L = tokens.size(1);
  if (!given.defined()) {
    *end = L;
    return id_range(0, L, tokens);
  }
  TORCH_CHECK(given.device().is_cpu() && given.dim() == 1 && given.size(0) == L, "position ids: expected ", L,
              " ids on the CPU, got ", given.sizes());
  *end = given[L - 1].item<int64_t>() + 1;  // sorted; a CPU read, no device sync
  return given.to(tokens.device());
}

torch::Tensor TransformerImpl::run_stack(const torch::Tensor& tokens, const torch::Tensor& ids, int64_t end,
                                         KVCache* cache, const torch::Tensor& padding,
                                         const torch::Tensor& task_positions) {
  ForwardCache memo;
  // Queries at `ids`; keys at every position so far (the cached ones and these).
  const torch::Tensor keys = cache && cache->length > 0 ? id_range(0, end, tokens) : ids;
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
  auto x = embed_tokens(tokens);  // (B, L, D) or (B, L, 3D) for embedded QKV
  if (input_scheme_ != nullptr) x = input_scheme_->embed(x, embed_pos);
  const Positions& block_embed_pos = input_scheme_ != nullptr ? pos : embed_pos;
  if (keep_hidden_) hidden_.clear();
  for (int64_t i = 0; i < cfg_.layers; ++i) {
    LayerCache* layer_cache = cache ? &cache->layers[static_cast<size_t>(i)] : nullptr;
    if (i == 0 && cfg_.qkv == Qkv::Embedded) {
      if (keep_hidden_) hidden_.push_back(x);  // (B, L, 3D): q, k, v side by side
      auto qkv = x.chunk(3, /*dim=*/-1);       // 3 x (B, L, D)
      x = blocks_[0]->forward_qkv(qkv[0], qkv[1], qkv[2], stack_schemes_.attend_with[0], pos, layer_cache);
      continue;
    }
    if (stack_schemes_.embed_at[i]) x = stack_schemes_.embed_at[i]->embed(x, block_embed_pos);
    if (keep_hidden_) hidden_.push_back(x);  // (B, L, D): what block i reads
    x = blocks_[i]->forward(x, stack_schemes_.attend_with[i], pos, layer_cache);
  }
  if (keep_hidden_) hidden_.push_back(x);  // (B, L, D): what the last block wrote
  return final_ln_->forward(x);            // (B, L, D)
}

double TransformerImpl::blocks_flops(const SchemePlacement& at, int64_t n, int64_t batch, int64_t length,
                                     bool first_projects) const {
  const double B = batch, D = cfg_.d_model, F = cfg_.d_ff, L = static_cast<double>(length);
  const int64_t H = cfg_.heads, Dh = cfg_.d_model / cfg_.heads;
  // Per block: projections, q·k and p·v, the scheme, W_out, the feed-forward.
  double flops = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (at.embed_at[i]) flops += at.embed_at[i]->embed_flops(batch, length, cfg_.d_model);
    if (i > 0 || first_projects) flops += 2 * B * L * D * 3 * D;  // W_qkv
    flops += 2 * 2 * B * L * L * D;                               // q·k and p·v over all heads
    if (at.attend_with[i]) flops += at.attend_with[i]->attention_flops(batch, H, length, length, Dh);
    flops += 2 * B * L * D * D + 2 * 2 * B * L * D * F;  // W_out and the feed-forward
  }
  return flops;
}

double TransformerImpl::stack_flops(int64_t batch, int64_t length) const {
  const double input = input_scheme_ ? input_scheme_->embed_flops(batch, length, cfg_.d_model) : 0.0;
  return input + blocks_flops(stack_schemes_, cfg_.layers, batch, length, cfg_.qkv != Qkv::Embedded);
}

void TransformerImpl::check_length(int64_t tokens, bool task_positions) const {
  const int64_t needed = model_length(tokens);
  for (const auto& s : schemes_)
    if (s->max_positions() > 0 && needed > s->max_positions() && !(task_positions && s->capabilities().embed))
      throw ConfigError("an example of " + std::to_string(tokens) + " tokens needs " + std::to_string(needed) +
                        " positions but model.positional.type=" + cfg_.positional.type + " encodes at most " +
                        std::to_string(s->max_positions()) + " (model.positional.max_positions)");
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
  for (const auto& b : blocks_) all.push_back(b->attention);
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

std::vector<torch::Tensor> TransformerImpl::attention_logit_factors() const {
  std::vector<torch::Tensor> factors;
  for (const auto& a : attention_modules()) factors.push_back(a->last_logit_factor());
  return factors;
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
