#include "posenc/train/adamw_update.h"

#include <cmath>

namespace posenc {

void adamw_update(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, const AdamWUpdate& u) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float pi = p[i] * u.decay;
    const float mi = m[i] * u.beta1 + u.one_minus_beta1 * gi;
    const float vi = v[i] * u.beta2 + u.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + u.neg_step_size * mi / (std::sqrt(vi) / u.sqrt_bias_correction2 + u.eps);
  }
}

}  // namespace posenc
