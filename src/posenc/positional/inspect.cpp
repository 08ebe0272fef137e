#include "posenc/positional/inspect.h"

#include "posenc/config.h"
#include "posenc/positional/scheme.h"

namespace posenc {
namespace {

nlohmann::json to_nested(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kFloat64).contiguous();
  if (c.dim() == 1) return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < c.size(0); ++i) out.push_back(to_nested(c[i]));
  return out;
}

}  // namespace

nlohmann::json inspect_scheme(const InspectRequest& r) {
  const SchemeInfo& info = find_scheme(r.scheme);
  if (r.dim % r.heads != 0)
    throw ConfigError("--heads " + std::to_string(r.heads) + " does not divide --dim " + std::to_string(r.dim));
  const SchemeOptions options = resolve_scheme_options(info, r.options, "--set");
  torch::manual_seed(static_cast<uint64_t>(r.seed));
  const auto scheme = info.make({r.dim, r.heads, r.dim / r.heads, 0}, options);
  scheme->eval();
  c10::InferenceMode guard;
  const Capabilities caps = scheme->capabilities();
  ForwardCache cache;
  auto ids = torch::arange(r.length, torch::kLong);
  const Positions pos{ids, ids, r.length, &cache};

  nlohmann::json out = {{"scheme", r.scheme},   {"length", r.length},
                        {"heads", r.heads},     {"dim", r.dim},
                        {"options", options.json()}, {"directional", scheme->directional()}};
  if (caps.embed) {
    out["embedding"] = to_nested(scheme->embed(torch::zeros({1, r.length, r.dim}), pos)[0]);  // (L, D)
  }
  if (caps.bias) {
    out["bias"] = to_nested(scheme->bias(pos)[0].expand({r.heads, r.length, r.length}));  // (H, L, L), shared-head biases repeated
  }
  if (caps.rotate) {
    torch::manual_seed(static_cast<uint64_t>(r.seed));
    const auto one_head = info.make({r.dim, 1, r.dim, 0}, options);
    auto q = torch::ones({1, 1, r.length, r.dim}), k = torch::ones({1, 1, r.length, r.dim});
    one_head->rotate(q, k, Positions{ids, ids, r.length, nullptr});
    out["rotated_ones"] = to_nested(q[0][0]);  // (L, D)
  }
  out["hooks"] = caps.hook_names();
  return out;
}

}  // namespace posenc
