#include "posenc/train/decode.h"

#include "posenc/util/interrupt.h"

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

}  // namespace

torch::Tensor continue_tokens(Transformer& model, const torch::Tensor& prompt, int64_t steps,
                              const Sampling& sampling) {
  TORCH_CHECK(model->is_decoder(), "continue_tokens needs model.kind=decoder");
  const bool was_training = model->is_training();
  model->eval();
  c10::InferenceMode guard;
  torch::Generator gen = at::detail::createCPUGenerator(sampling.seed);
  std::vector<torch::Tensor> out;                       // steps x (B, 1)
  const auto next = [&](const torch::Tensor& logits) {  // (B, V+2) -> (B, 1)
    if (sampling.non_finite_rows) {
      auto bad = torch::isfinite(logits).logical_not().any(-1);  // (B)
      auto& rows = *sampling.non_finite_rows;
      rows = rows.defined() ? rows.logical_or(bad) : bad;
    }
    return pick(logits, sampling, gen);
  };
  const auto stop = [&] { return sampling.interruptible && interrupt_signal() != 0; };
  if (model->supports_kv_cache()) {
    KVCache cache;
    auto logits = model->decode(prompt, cache).select(1, -1);  // (B, V+2)
    for (int64_t t = 0; t < steps && !stop(); ++t) {
      out.push_back(next(logits));
      if (t + 1 < steps) logits = model->decode(out.back(), cache).select(1, 0);
    }
  } else {
    auto seq = prompt;  // (B, P + t)
    for (int64_t t = 0; t < steps && !stop(); ++t) {
      out.push_back(next(model->forward(seq).select(1, -1)));
      seq = torch::cat({seq, out.back()}, 1);
    }
  }
  if (was_training) model->train();
  return out.empty() ? torch::empty({prompt.size(0), 0}, prompt.options()) : torch::cat(out, 1);  // (B, steps)
}

}  // namespace posenc
