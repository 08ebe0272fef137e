// Small statistics shared by evaluation and the torch-free comparison summary.
#pragma once

#include <cstdint>

namespace posenc {

struct Interval {
  double lo = 0, hi = 0;
};

/// Wilson score interval for `correct` successes in `n` trials (z = 1.96 for 95%).
Interval wilson_interval(int64_t correct, int64_t n, double z = 1.96);

}  // namespace posenc
