#include "posenc/positional/tables.h"

namespace posenc {

torch::Tensor sinusoidal_table(const torch::Tensor& positions, int64_t dim, double base, const std::string& layout) {
  TORCH_CHECK(dim % 2 == 0, "sinusoidal table: dim ", dim, " must be even");
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(positions.device());
  // Angles in float64 so that large positions keep their precision.
  auto i = torch::arange(dim / 2, opts);                                        // (D/2)
  auto freq = torch::pow(torch::full({}, base, opts), -2.0 * i / double(dim));  // (D/2)
  auto angle = positions.to(torch::kFloat64).unsqueeze(1) * freq.unsqueeze(0);  // (L, D/2)
  auto s = torch::sin(angle), c = torch::cos(angle);
  torch::Tensor table;
  if (layout == "concat") {
    table = torch::cat({s, c}, /*dim=*/1);  // (L, D)
  } else {
    TORCH_CHECK(layout == "interleaved", "sinusoidal table: unknown layout ", layout);
    table = torch::stack({s, c}, /*dim=*/2).reshape({positions.size(0), dim});  // (L, D/2, 2) -> (L, D)
  }
  return table;
}

}  // namespace posenc
