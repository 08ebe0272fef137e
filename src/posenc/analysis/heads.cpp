#include "posenc/analysis/heads.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "posenc/analysis/examples.h"
#include "posenc/analysis/trained.h"
#include "posenc/config.h"
#include "posenc/errors.h"
#include "posenc/model/encoder.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/evaluation_changes.h"
#include "posenc/train/fits.h"
#include "posenc/util/interrupt.h"

namespace posenc {

void HeadAccumulator::add(const at::Tensor& maps, const at::Tensor& queries, const at::Tensor& keys, bool causal,
                          int64_t window, const at::Tensor& logit_factor) {
  TORCH_CHECK(maps.dim() == 4 && maps.size(2) == maps.size(3), "heads: expected maps (B, H, L, L), got ", maps.sizes());
  const int64_t B = maps.size(0), H = maps.size(1), L = maps.size(2);
  TORCH_CHECK(queries.dim() == 2 && queries.size(0) == B && queries.size(1) == L && keys.sizes() == queries.sizes(),
              "heads: expected queries and keys (", B, ", ", L, "), got ", queries.sizes(), " and ", keys.sizes());
  if (!sums_.defined()) sums_ = torch::zeros({H, 8}, torch::kFloat64);
  TORCH_CHECK(sums_.size(0) == H, "heads: ", H, " heads where earlier chunks had ", sums_.size(0));

  const auto w = maps.to(torch::kCPU, torch::kFloat64);         // (B, H, L, L)
  const auto index = torch::arange(L, torch::kFloat64);         // (L)
  const auto offset = index.view({1, L}) - index.view({L, 1});  // (L, L): j - i
  const auto gap = offset.abs();                                // (L, L): |j - i|
  const auto left = (w * offset.lt(0)).sum(-1);                 // (B, H, L)
  const auto self = w.diagonal(0, -2, -1);                      // (B, H, L)
  const auto right = (w * offset.gt(0)).sum(-1);                // (B, H, L)
  const auto distance = (w * gap).sum(-1);                      // (B, H, L)
  const auto entropy = -torch::xlogy(w, w).sum(-1);             // (B, H, L); 0·log 0 = 0

  // The keys each query sees: the tokens, with a causal mask those at j <= i, and with a window those within it.
  auto seen = keys.to(torch::kCPU).to(torch::kBool).view({B, 1, L}).expand({B, L, L});  // (B, Lq, Lk)
  if (causal) seen = seen.logical_and(offset.le(0));
  if (window > 0) seen = seen.logical_and(gap.lt(static_cast<double>(window)));
  const auto seen_f = seen.to(torch::kFloat64);
  const auto n = seen_f.sum(-1);                                      // (B, L)
  const auto counted = queries.to(torch::kCPU).to(torch::kFloat64);   // (B, L)
  const auto wide = counted * n.ge(2).to(torch::kFloat64);            // (B, L): the queries a flatness is defined at
  const auto flatness = entropy / n.clamp_min(2).log().unsqueeze(1);  // (B, H, L)

  const auto per_head = [](const at::Tensor& v, const at::Tensor& m) {
    return (v * m.unsqueeze(1)).sum(at::IntArrayRef{0, 2});
  };
  at::Tensor factor = torch::ones({B, H, L}, torch::kFloat64);  // (B, H, L): 1 where no factor is on
  if (logit_factor.defined()) {
    TORCH_CHECK(logit_factor.dim() == 4 && logit_factor.size(3) == 1, "heads: expected a logit factor (1|B, H|1, ",
                "L|1, 1), got ", logit_factor.sizes());
    factor = logit_factor.to(torch::kCPU, torch::kFloat64).squeeze(3).expand({B, H, L});
    has_factor_ = true;
  }
  sums_ += torch::stack({per_head(left, counted), per_head(self, counted), per_head(right, counted),
                         per_head(distance, counted), per_head(entropy, counted), per_head(flatness, wide),
                         per_head(entropy.exp(), counted), per_head(factor, counted)},
                        1);  // (H, 8)
  queries_ += static_cast<int64_t>(counted.sum().item<double>());
  flat_queries_ += static_cast<int64_t>(wide.sum().item<double>());
  // A flat head's mean distance at each query: the mean |j - i| over the keys it sees.
  flat_distance_ += ((seen_f * gap).sum(-1) / n.clamp_min(1) * counted).sum().item<double>();
  flat_keys_ += (n * counted).sum().item<double>();
}

std::vector<HeadStats> HeadAccumulator::stats() const {
  std::vector<HeadStats> out;
  if (queries_ == 0) return out;
  const auto s = sums_.contiguous();
  const double* v = s.data_ptr<double>();
  const double q = static_cast<double>(queries_);
  const double flat = flat_queries_ > 0 ? static_cast<double>(flat_queries_) : std::nan("");
  for (int64_t h = 0; h < s.size(0); ++h, v += 8)
    out.push_back({v[0] / q, v[1] / q, v[2] / q, v[3] / q, v[4] / q, v[5] / flat, v[6] / q,
                   has_factor_ ? v[7] / q : std::nan("")});
  return out;
}

double HeadAccumulator::flat_distance() const {
  return queries_ > 0 ? flat_distance_ / static_cast<double>(queries_) : std::nan("");
}

double HeadAccumulator::flat_keys() const {
  return queries_ > 0 ? flat_keys_ / static_cast<double>(queries_) : std::nan("");
}

namespace {

/// Maps kept per forward, in bytes, beyond which a length's examples are forwarded in smaller chunks.
constexpr double kMapBytesPerChunk = 256.0 * (1 << 20);

/// One self-attention module the statistics read: which stack's tokens it
/// runs over, whether it is causal, its window, whether nope_every leaves it
/// without positions, and its name in the output.
struct ReadModule {
  size_t map = 0;       ///< its index in TransformerImpl::attention_maps()
  bool target = false;  ///< over ModelInputs::target (an encoder_decoder's decoder) instead of tokens
  bool causal = false;
  int64_t window = 0;  ///< model.attention.window where it applies, else 0
  bool nope_block = false;
  std::string name;
};

std::vector<ReadModule> read_modules(const ModelConfig& m) {
  std::vector<ReadModule> out;
  // Block b (from 0) of a self-attention stack.
  const auto module = [&](size_t map, bool target, bool causal, int64_t b, const std::string& name) {
    return ReadModule{map, target, causal, m.window_of_block(b), m.positional.nope_block(b), name};
  };
  if (m.kind != ModelKind::EncoderDecoder) {
    for (int64_t b = 0; b < m.layers; ++b)
      out.push_back(
          module(static_cast<size_t>(b), false, m.kind == ModelKind::Decoder, b, fmt::format("block {}", b + 1)));
    return out;
  }
  for (int64_t b = 0; b < m.layers; ++b)
    out.push_back(module(static_cast<size_t>(b), false, false, b, fmt::format("encoder block {}", b + 1)));
  // Then (self, cross) per decoder block: the cross-attention is left out.
  for (int64_t b = 0; b < m.decoder_layers; ++b)
    out.push_back(module(static_cast<size_t>(m.layers + 2 * b), true, true, b, fmt::format("decoder block {}", b + 1)));
  return out;
}

/// ModelInputs restricted to the rows `index` (K) names.
ModelInputs select_rows(const ModelInputs& in, const at::Tensor& index) {
  const auto rows = [&](const at::Tensor& t) { return t.defined() ? t.index_select(0, index) : at::Tensor(); };
  return {rows(in.tokens), rows(in.target), rows(in.task_positions), in.target_first};
}

/// Which queries and keys of `tokens` (B, L) a module counts, as (queries, keys)
/// (B, L') bool: padding is neither, the encoder's CLS (column 0 of L' = L + 1)
/// both; with `answer_from` >= 0, only columns from it on are queries.
std::pair<at::Tensor, at::Tensor> counted_tokens(const at::Tensor& tokens, int64_t width, int64_t answer_from) {
  auto keys = tokens.ne(0);  // (B, L)
  if (width == tokens.size(1) + 1) keys = torch::cat({torch::ones({tokens.size(0), 1}, torch::kBool), keys}, 1);
  TORCH_CHECK(keys.size(1) == width, "heads: maps over ", width, " positions for ", tokens.size(1), " tokens");
  auto queries = keys.clone();
  if (answer_from > 0) queries.narrow(1, 0, std::min(answer_from, width)).fill_(false);
  return {queries, keys};
}

}  // namespace

nlohmann::json head_statistics(const std::string& checkpoint, const HeadsRequest& r) {
  Config cfg = read_checkpoint_config(checkpoint);
  if (!r.overrides.empty()) cfg = with_evaluation_changes(cfg, r.overrides);
  Transformer model = load_model_as(checkpoint, torch::kCPU, cfg);
  if (r.samples < 1) throw ConfigError(fmt::format("--samples {}: at least 1 example", r.samples));
  const std::unique_ptr<Task> task = make_task(cfg.task);
  check_data_identity(*task, cfg, r.overrides);
  const ModelConfig& m = cfg.model;
  const int wanted = r.kind.empty() ? 0 : requested_kind(model, *task, cfg.task.type, r.kind);
  if (r.queries != "all" && r.queries != "answer") throw ConfigError("--queries " + r.queries + ": all or answer");
  if (r.queries == "answer" && m.kind != ModelKind::Decoder)
    throw ConfigError(fmt::format(
        "--queries answer: picks a decoder's queries that predict its answer; {} is an {} ({}); leave it out",
        checkpoint, name_of(m.kind),
        m.kind == ModelKind::Encoder ? "a classifier reads no answer"
                                     : "its decoder reads only the answer, its encoder only the source"));
  const std::vector<int64_t> lengths = r.lengths.empty() ? cfg.eval.lengths : r.lengths;
  check_evaluation_lengths(model, *task, evaluation_spec(cfg), lengths);
  const std::vector<ReadModule> modules = read_modules(m);
  const double maps_per_example =
      static_cast<double>(m.layers + 2 * (m.kind == ModelKind::EncoderDecoder ? m.decoder_layers : 0)) * m.heads;
  const auto chunk_of = [&](int64_t tokens) {
    const double positions = static_cast<double>(model->model_length(tokens));
    const double bytes = maps_per_example * positions * positions * 4.0;  // float32 maps of one example
    return std::pair<int64_t, double>{
        std::max<int64_t>(1, std::min<int64_t>(evaluation_batch_size(model, tokens, cfg.eval.max_batch_tokens),
                                               static_cast<int64_t>(kMapBytesPerChunk / bytes))),
        bytes};
  };
  // Every length's memory is counted before any forward runs: a chunk's maps
  // kept, and float64 temporaries of one module's while its statistics are made.
  for (const int64_t length : lengths) {
    const int64_t tokens = task->sequence_length(length);
    const auto [chunk, bytes] = chunk_of(tokens);
    require_memory(evaluation_memory_bytes(model, tokens, chunk, cfg.eval.max_batch_tokens) +
                       static_cast<double>(chunk) * bytes * (1.0 + 8.0 / static_cast<double>(modules.size())),
                   torch::kCPU, fmt::format("head statistics at length {}", length),
                   fmt::format("{} example(s) of attention maps at a time", chunk), "choose a shorter length");
  }

  model->eval();
  model->keep_attention(true);
  model->force_explicit_attention(true);  // the fused path does not expose its weights
  c10::InferenceMode guard;
  nlohmann::json per_length = nlohmann::json::array();
  for (const int64_t length : lengths) {
    const TaskBatch set = task->fixed_set(length, r.samples, cfg.eval.seed);
    ModelInputs inputs = model_inputs(model, set);
    at::Tensor labels = set.labels;
    if (!r.kind.empty()) {
      std::vector<int64_t> rows;
      for (size_t i = 0; i < set.kinds.size(); ++i)
        if (set.kinds[i] == wanted) rows.push_back(static_cast<int64_t>(i));
      if (rows.empty())
        throw ConfigError(fmt::format(
            "--kind {}: none of the {} examples at length {} is of that kind (its weight in task.negatives may be "
            "0); choose more --samples",
            r.kind, set.tokens.size(0), length));
      const auto index = torch::tensor(rows, torch::kLong);
      inputs = select_rows(inputs, index);
      if (labels.defined()) labels = labels.index_select(0, index);
    }
    const int64_t examples = inputs.tokens.size(0);
    const int64_t chunk = chunk_of(set.tokens.size(1)).first;
    // A decoder's query at column c predicts token c + 1: the answer's from answer_start - 1 on.
    const int64_t answer_from = r.queries == "answer" ? set.answer_start - 1 : -1;
    std::vector<HeadAccumulator> sums(modules.size());
    int64_t right = 0;
    for (int64_t start = 0; start < examples; start += chunk) {
      throw_if_interrupted();
      const int64_t n = std::min(chunk, examples - start);
      const ModelInputs rows = rows_of(inputs, start, n);
      const auto out = forward_inputs(model, rows, "head statistics");
      if (m.kind == ModelKind::Encoder && labels.defined())
        right += out.argmax(-1).eq(labels.narrow(0, start, n)).sum().item<int64_t>();
      const auto maps = model->attention_maps();
      const auto factors = model->attention_logit_factors();
      for (size_t i = 0; i < modules.size(); ++i) {
        const at::Tensor& w = maps.at(modules[i].map);  // (n, H, L', L')
        const auto [queries, keys] =
            counted_tokens(modules[i].target ? rows.target : rows.tokens, w.size(2), answer_from);
        sums[i].add(w, queries, keys, modules[i].causal, modules[i].window, factors.at(modules[i].map));
      }
    }
    nlohmann::json blocks = nlohmann::json::array();
    for (size_t i = 0; i < modules.size(); ++i) {
      nlohmann::json heads = nlohmann::json::array();
      const auto stats = sums[i].stats();
      for (size_t h = 0; h < stats.size(); ++h)
        heads.push_back({{"head", h},
                         {"left", stats[h].left},
                         {"self", stats[h].self},
                         {"right", stats[h].right},
                         {"distance", stats[h].distance},
                         {"entropy", stats[h].entropy},
                         {"flatness", stats[h].flatness},
                         {"effective_keys", stats[h].effective_keys},
                         {"logit_factor", std::isnan(stats[h].logit_factor) ? nlohmann::json(nullptr)
                                                                            : nlohmann::json(stats[h].logit_factor)}});
      blocks.push_back({{"block", modules[i].name},
                        {"causal", modules[i].causal},
                        {"window", modules[i].window},
                        {"nope_block", modules[i].nope_block},
                        {"queries", sums[i].queries()},
                        {"flat_distance", sums[i].flat_distance()},
                        {"keys_seen", sums[i].flat_keys()},
                        {"heads", heads}});
    }
    nlohmann::json accuracy = nullptr;
    if (m.kind == ModelKind::Encoder && labels.defined())
      accuracy = static_cast<double>(right) / static_cast<double>(examples);
    per_length.push_back({{"length", length}, {"examples", examples}, {"accuracy", accuracy}, {"blocks", blocks}});
  }
  model->keep_attention(false);
  model->force_explicit_attention(false);
  return {{"checkpoint", checkpoint},
          {"scheme", m.positional.type},
          {"input_scheme", m.positional.input},
          {"with_scheme", m.positional.with},
          {"weights", name_of(m.attention_weights)},
          {"window", m.attention_window},
          {"nope_every", m.positional.nope_every},
          {"task", cfg.task.type},
          {"kind", name_of(m.kind)},
          {"example_kind", r.kind.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.kind)},
          {"queries", r.queries},
          {"samples", r.samples},
          {"overrides", r.overrides},
          {"trained_lengths", {cfg.task.min_length, cfg.task.max_length}},
          {"lengths", per_length}};
}

}  // namespace posenc
