// A tensor's values as a std::vector<double>, for JSON and for the reductions
// that leave the device (results files, the data-parallel tallies, attention
// maps, scheme descriptions).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace posenc {

/// Every value of `t` in row-major order, as float64 on the CPU, whatever its
/// device, dtype or strides; the gradient graph is not followed.
inline std::vector<double> tensor_values(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* first = c.data_ptr<double>();
  return std::vector<double>(first, first + c.numel());
}

}  // namespace posenc
