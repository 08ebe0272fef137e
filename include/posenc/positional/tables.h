// Fixed position tables shared by several schemes and by `posenc inspect`.
#pragma once

#include <string>

#include <torch/torch.h>

namespace posenc {

/// Sinusoidal table for the given position ids (Vaswani et al. 2017).
/// positions (L) int64 -> (L, dim) float64 (callers cast to their dtype).
/// layout "interleaved": PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i) (the paper);
/// layout "concat": [sin(p w_0..w_{dim/2-1}) ‖ cos(...)] (many codebases).
/// w_i = base^(-2i/dim). dim must be even.
torch::Tensor sinusoidal_table(const torch::Tensor& positions, int64_t dim, double base = 10000.0,
                               const std::string& layout = "interleaved");

}  // namespace posenc
