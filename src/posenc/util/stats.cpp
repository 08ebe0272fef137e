#include "posenc/util/stats.h"

#include <algorithm>
#include <cmath>

namespace posenc {

Interval wilson_interval(int64_t correct, int64_t n, double z) {
  if (n == 0) return {0.0, 1.0};
  const double p = static_cast<double>(correct) / n, z2 = z * z;
  const double denom = 1.0 + z2 / n;
  const double center = (p + z2 / (2.0 * n)) / denom;
  const double half = z * std::sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denom;
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

}  // namespace posenc
