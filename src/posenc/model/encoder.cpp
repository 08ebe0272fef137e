#include "posenc/model/encoder.h"
#include "posenc/util/linear.h"

#include <cmath>

namespace posenc {

EncoderImpl::EncoderImpl(const ModelConfig& cfg, int64_t vocab_size) : TransformerImpl(cfg, vocab_size) {
  TORCH_CHECK(cfg.kind == ModelKind::Encoder, "EncoderImpl built from a config of model.kind=", name_of(cfg.kind));
  register_token_embedding();
  if (cfg.pooling == Pooling::Lse)
    log_temperature_ = register_parameter("pool_log_temperature", torch::zeros({cfg.d_model}));  // tau = 1 at first
  place_stack_schemes(/*causal=*/false);
  register_stack(/*causal=*/false);
  register_head(2);
}

torch::Tensor EncoderImpl::forward(const torch::Tensor& tokens_in, const torch::Tensor& given_ids) {
  auto tokens = tokens_in;  // (B, L)
  if (cfg_.pooling == Pooling::Cls) {
    auto cls = torch::full({tokens.size(0), 1}, cls_token(), tokens.options());
    tokens = torch::cat({cls, tokens}, /*dim=*/1);  // (B, L+1)
  }
  int64_t end = 0;                                                   // one past the largest id, known on the host
  const auto ids = position_ids(tokens, given_ids, &end);            // (L)
  return linear(head_, pool(run_stack(tokens, ids, end, nullptr)));  // (B, 2)
}

torch::Tensor EncoderImpl::pool(const torch::Tensor& x) const {
  switch (cfg_.pooling) {
    case Pooling::Cls: return x.select(1, 0);  // (B, D)
    case Pooling::Mean: return x.mean(1);
    case Pooling::Lse: {
      // tau * log(mean_i exp(x_i / tau)) per feature: mean as tau -> inf, max as tau -> 0.
      const auto tau = log_temperature_.exp();  // (D)
      return tau * (torch::logsumexp(x / tau, /*dim=*/1) - std::log(static_cast<double>(x.size(1))));
    }
    case Pooling::Max: break;
  }
  return std::get<0>(x.max(1));
}

std::pair<torch::Tensor, torch::Tensor> EncoderImpl::classify_positions(const torch::Tensor& tokens) {
  TORCH_CHECK(cfg_.pooling != Pooling::Cls,
              "classify_positions() needs an encoder that pools every position (max, mean or lse)");
  int64_t end = 0;
  const auto ids = position_ids(tokens, {}, &end);    // 0..L-1
  auto x = run_stack(tokens, ids, end, nullptr);      // (B, L, D)
  return {linear(head_, pool(x)), linear(head_, x)};  // (B, 2), (B, L, 2)
}

double EncoderImpl::forward_flops(int64_t batch, int64_t length) const {
  const double head = 2.0 * batch * cfg_.d_model * 2;
  return stack_flops(batch, model_length(length)) + head;
}

EncoderImpl& classifier_of(Transformer& model, const std::string& what) {
  auto* encoder = model->as<EncoderImpl>();
  if (encoder == nullptr) throw IncompatibleConfig(what + " needs model.kind=encoder");
  return *encoder;
}

}  // namespace posenc
