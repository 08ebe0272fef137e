#include "posenc/train/decode.h"

#include "posenc/util/interrupt.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>

namespace posenc {
namespace {

/// logits (B, V) -> next tokens (B, 1).
torch::Tensor pick(const torch::Tensor& logits_in, const Sampling& s, torch::Generator& gen) {
  if (s.temperature <= 0) return logits_in.argmax(-1, /*keepdim=*/true);
  auto logits = logits_in.to(torch::kFloat).cpu() / s.temperature;  // (B, V)
  if (s.last_token > 0) {
    auto outside = torch::ones({logits.size(-1)}, torch::kBool);
    outside.narrow(0, s.first_token, s.last_token - s.first_token + 1).fill_(false);
    logits = logits.masked_fill(outside, -std::numeric_limits<float>::infinity());
  }
  if (s.top_k > 0 && s.top_k < logits.size(-1)) {
    auto kth = std::get<0>(logits.topk(s.top_k, -1)).narrow(-1, s.top_k - 1, 1);  // (B, 1)
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  auto probs = torch::softmax(logits, -1);  // (B, V)
  return at::multinomial(probs, 1, /*replacement=*/false, gen).to(logits_in.device());
}

/// The decoding state of a batch of rows: the next-token logits, fed one token
/// per row at a time, from a KV cache where every scheme allows one and by
/// rerunning the target otherwise.
class Stepper {
 public:
  Stepper(NextTokenModel& model, bool cached, const torch::Tensor& prompt, const torch::Tensor& positions = {})
      : model_(model), cached_(cached), positions_(positions) {
    seq_ = model.begin_decoding(prompt, cache_);  // (B, P), or (B, 1) SEP for an encoder_decoder
    logits_ = run(seq_).select(1, -1);            // (B, V+2)
  }
  const torch::Tensor& logits() const { return logits_; }
  /// next (B, 1): the rows' next tokens.
  void feed(const torch::Tensor& next) {
    seq_ = torch::cat({seq_, next}, 1);
    logits_ = (cached_ ? run(next) : run(seq_)).select(1, -1);
  }
  /// Keeps rows `rows` (int64) in that order.
  void keep_rows(const torch::Tensor& rows) {
    select_cache_rows(cache_, rows);
    seq_ = seq_.index_select(0, rows);
    logits_ = logits_.index_select(0, rows);
    if (positions_.defined()) positions_ = positions_.index_select(0, rows.cpu());
  }

 private:
  /// The cached path feeds the new tokens; the other one the whole sequence.
  torch::Tensor run(const torch::Tensor& tokens) {
    // The task's ids of these tokens: the cached path feeds the newest, the other the whole sequence.
    const int64_t n = tokens.size(1), first = cached_ ? seq_.size(1) - n : 0;
    const auto ids = positions_.defined() ? positions_.narrow(1, first, n) : positions_;  // (B, n)
    return cached_ ? model_.decode(tokens, cache_, ids) : model_.decode_uncached(tokens, cache_, ids);
  }
  NextTokenModel& model_;
  bool cached_;
  torch::Tensor positions_;  // (B, P + steps) or undefined
  KVCache cache_;
  torch::Tensor seq_, logits_;
};

/// Eval mode and InferenceMode for a decoding, the mode restored afterwards.
struct DecodingMode {
  explicit DecodingMode(Transformer& m) : model(m), was_training(m->is_training()) { model->eval(); }
  ~DecodingMode() {
    if (was_training) model->train();
  }
  Transformer& model;
  bool was_training;
  c10::InferenceMode guard;
};

}  // namespace

torch::Tensor continue_tokens(Transformer& model, const torch::Tensor& prompt, int64_t steps,
                              const Sampling& sampling) {
  NextTokenModel& next = next_token_model(model, "continuing tokens");
  DecodingMode mode(model);
  torch::Generator gen = at::detail::createCPUGenerator(sampling.seed);
  std::vector<torch::Tensor> out;  // steps x (B, 1)
  const auto stop = [&] { return sampling.interruptible && interrupt_signal() != 0; };
  TORCH_CHECK(!sampling.positions.defined() || (sampling.positions.size(0) == prompt.size(0) &&
                                                sampling.positions.size(1) >= prompt.size(1) + steps - 1),
              "continue_tokens: task positions for ", prompt.size(1) + steps - 1, " tokens expected, got ",
              sampling.positions.sizes());
  Stepper stepper(next, model->supports_kv_cache(), prompt, sampling.positions);
  for (int64_t t = 0; t < steps && !stop(); ++t) {
    torch::Tensor logits = stepper.logits();  // (B, V+2)
    if (sampling.non_finite_rows) {
      auto bad = torch::isfinite(logits).logical_not().any(-1);  // (B)
      auto& rows = *sampling.non_finite_rows;
      rows = rows.defined() ? rows.logical_or(bad) : bad;
    }
    if (sampling.hold_token > 0) {  // after the finiteness check: the held token's -inf is ours
      logits = logits.clone();
      logits.select(1, sampling.hold_token)
          .masked_fill_(sampling.hold_until.to(logits.device()).gt(t), -std::numeric_limits<float>::infinity());
    }
    out.push_back(pick(logits, sampling, gen));
    if (t + 1 < steps) stepper.feed(out.back());
  }
  return out.empty() ? torch::empty({prompt.size(0), 0}, prompt.options()) : torch::cat(out, 1);  // (B, steps)
}

std::vector<Hypothesis> beam_search(Transformer& model, const torch::Tensor& prompt, int64_t steps,
                                    const BeamOptions& options) {
  NextTokenModel& next = next_token_model(model, "beam search");
  TORCH_CHECK(prompt.size(0) == 1, "beam search takes one prompt at a time");
  TORCH_CHECK(options.beam >= 1, "the beam holds at least one hypothesis");
  DecodingMode mode(model);
  const auto penalized = [&](double log_prob, size_t n) {
    return options.length_penalty == 0
               ? log_prob
               : log_prob / std::pow((5.0 + static_cast<double>(n)) / 6.0, options.length_penalty);
  };
  Stepper stepper(next, model->supports_kv_cache(), prompt);
  std::vector<Hypothesis> alive(1), finished;
  const auto k = static_cast<size_t>(options.beam);
  for (int64_t t = 0; t < steps && !alive.empty(); ++t) {
    throw_if_interrupted();  // a long output ends at a signal, not after its last step
    // Every alive hypothesis extended by every token, best first: (rows x V).
    auto log_probs = torch::log_softmax(stepper.logits().to(torch::kDouble), -1).cpu();  // (rows, V)
    std::vector<double> base;
    for (const auto& h : alive) base.push_back(h.log_prob);
    auto totals = log_probs + torch::tensor(base, torch::kDouble).unsqueeze(1);  // (rows, V)
    const int64_t V = totals.size(1);
    const int64_t take = std::min<int64_t>(2 * options.beam, totals.numel());
    auto [values, indices] = totals.flatten().topk(take);
    std::vector<Hypothesis> next;
    std::vector<int64_t> origins, tokens;
    for (int64_t c = 0; c < take && next.size() < k; ++c) {
      const int64_t index = indices[c].item<int64_t>(), origin = index / V, token = index % V;
      Hypothesis h = alive[static_cast<size_t>(origin)];
      h.tokens.push_back(token);
      h.log_prob = values[c].item<double>();
      h.score = penalized(h.log_prob, h.tokens.size());
      if (options.eos > 0 && token == options.eos) {
        if (c < options.beam) finished.push_back(std::move(h));  // an end among the k best
        continue;
      }
      next.push_back(std::move(h));
      origins.push_back(origin);
      tokens.push_back(token);
    }
    alive = std::move(next);
    if (alive.empty() || t + 1 == steps) break;
    // Done when k hypotheses have ended and none alive ranks above the worst of them yet.
    if (finished.size() >= k) {
      std::sort(finished.begin(), finished.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
      double best_alive = -std::numeric_limits<double>::infinity();
      for (const auto& h : alive) best_alive = std::max(best_alive, h.score);
      if (best_alive <= finished[k - 1].score) {
        alive.clear();
        break;
      }
    }
    const auto device = stepper.logits().device();
    stepper.keep_rows(torch::tensor(origins, torch::kLong).to(device));
    stepper.feed(torch::tensor(tokens, torch::kLong).view({-1, 1}).to(device));
  }
  // Hypotheses still alive at the last step end there (all of them where there is no end token).
  for (auto& h : alive) finished.push_back(std::move(h));
  std::sort(finished.begin(), finished.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
  if (finished.size() > k) finished.resize(k);
  return finished;
}

}  // namespace posenc
