#include "posenc/positional/inspect.h"

#include <algorithm>

#include <fmt/format.h>

#include "posenc/errors.h"
#include "posenc/positional/scheme.h"
#include "posenc/util/tensor_values.h"

namespace posenc {
namespace {

nlohmann::json to_nested(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kFloat64).contiguous();
  if (c.dim() == 1) return tensor_values(c);
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < c.size(0); ++i) out.push_back(to_nested(c[i]));
  return out;
}

}  // namespace

nlohmann::json describe_scheme(PositionalSchemeImpl& scheme, const SchemeInfo& info, const SchemeOptions& options,
                               int64_t length, int64_t heads, int64_t dim, int64_t rotate_dim, int64_t seed) {
  const bool was_training = scheme.is_training();
  scheme.eval();
  c10::InferenceMode guard;
  const Capabilities caps = scheme.capabilities();
  ForwardCache cache;
  const auto device = scheme.parameters().empty() ? torch::Device(torch::kCPU) : scheme.parameters()[0].device();
  auto ids = torch::arange(length, torch::TensorOptions().dtype(torch::kLong).device(device));
  const Positions pos{ids, ids, length, &cache};

  const double L = static_cast<double>(length);
  // Biases, score terms, value terms and reweighted scores are each (H, L, L).
  const int per_pair = int(caps.bias) + int(caps.score_terms) + int(caps.value_terms) + int(caps.reweight);
  const double numbers = (caps.embed ? L * dim : 0.0) + per_pair * heads * L * L + (caps.rotate ? L * rotate_dim : 0.0);
  if (numbers > kMaxJsonNumbers)
    throw ConfigError(fmt::format(
        "--length {}: the description of {} would hold {:.0f} numbers ({}), more than the {:.0f} one JSON file may "
        "hold; lower --length{}",
        length, info.name, numbers,
        per_pair > 0 ? fmt::format("{} x --heads {} x {}^2", per_pair, heads, length)
                     : fmt::format("{} x --dim {}", length, dim),
        kMaxJsonNumbers, per_pair > 0 ? " or --heads" : " or --dim"));
  nlohmann::json out = {{"scheme", info.name}, {"length", length},          {"heads", heads},
                        {"dim", dim},          {"options", options.json()}, {"directional", scheme.directional()}};
  if (caps.embed) {
    auto zeros = torch::zeros({1, length, dim}, torch::TensorOptions().device(device));
    out["embedding"] = to_nested(scheme.embed(zeros, pos)[0]);  // (L, D)
  }
  if (caps.bias) {
    out["bias"] =
        to_nested(scheme.bias(pos)[0].expand({heads, length, length}));  // (H, L, L), shared-head biases repeated
  }
  const auto per_head_ones = [&](int64_t last) {  // (1, H, L, last) of ones
    return torch::ones({1, heads, length, last}, torch::TensorOptions().device(device));
  };
  if (caps.score_terms) {
    // Score terms read q and k: an all-ones query and key in every head show
    // the positional part alone (what it adds to q·k, before the 1/sqrt(Dh) scale).
    auto q = per_head_ones(dim / heads), k = q.clone();
    auto qk = torch::matmul(q, k.transpose(-2, -1));                               // (1, H, L, L)
    out["score_terms_of_ones"] = to_nested(scheme.score_terms(q, k, qk, pos)[0]);  // (H, L, L)
  }
  if (caps.value_terms) {
    // Value terms are linear in the attention weights: weights all on key j
    // give what query i's output gains from attending to j alone, a vector of
    // the head's width, read out here with an all-ones vector as the score
    // terms are. Keys go through in batches (one batch element per key).
    const int64_t keys_per_batch = std::max<int64_t>(1, int64_t(kMaxJsonNumbers) / (heads * length * length));
    auto terms = torch::empty({heads, length, length}, torch::TensorOptions().device(device));  // (H, L, L)
    for (int64_t j0 = 0; j0 < length; j0 += keys_per_batch) {
      const int64_t n = std::min(keys_per_batch, length - j0);
      auto onto = torch::one_hot(ids.slice(0, j0, j0 + n), length).to(torch::kFloat);             // (n, L)
      auto probs = onto.view({n, 1, 1, length}).expand({n, heads, length, length}).contiguous();  // (n, H, L, L)
      auto gained = scheme.value_terms(probs, pos).sum(-1);                                       // (n, H, L)
      terms.slice(2, j0, j0 + n).copy_(gained.permute({1, 2, 0}));
    }
    out["value_terms_of_ones"] = to_nested(terms);  // (H, L, L): [h, i, j] for query i on key j alone
  }
  if (caps.reweight) {
    // What reweighting makes of scores that are all 1: the distance function alone.
    out["reweighted_ones"] = to_nested(scheme.reweight(per_head_ones(length), pos)[0]);  // (H, L, L)
  }
  if (caps.rotate) {
    torch::manual_seed(static_cast<uint64_t>(seed));
    const auto one_head = info.make({rotate_dim, 1, rotate_dim, 0}, options);
    one_head->to(device);
    auto q = torch::ones({1, 1, length, rotate_dim}, torch::TensorOptions().device(device)), k = q.clone();
    one_head->rotate(q, k, Positions{ids, ids, length, nullptr});
    out["rotated_ones"] = to_nested(q[0][0]);  // (L, rotate_dim)
  }
  out["hooks"] = caps.hook_names();
  scheme.train(was_training);
  return out;
}

nlohmann::json inspect_scheme(const InspectRequest& r) {
  const SchemeInfo& info = find_scheme(r.scheme);
  if (r.dim % r.heads != 0)
    throw ConfigError("--heads " + std::to_string(r.heads) + " does not divide --dim " + std::to_string(r.dim));
  const SchemeOptions options = resolve_scheme_options(info, r.options, "--set");
  torch::manual_seed(static_cast<uint64_t>(r.seed));
  const auto scheme = info.make({r.dim, r.heads, r.dim / r.heads, 0}, options);
  return describe_scheme(*scheme, info, options, r.length, r.heads, r.dim, r.dim, r.seed);
}

}  // namespace posenc
