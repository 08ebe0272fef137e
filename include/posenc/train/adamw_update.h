// The element loop of FusedAdamW's CPU step (train/fused_adamw.h), in a file of
// its own: it is compiled with -fno-math-errno, so that std::sqrt needs no errno
// branch and the loop vectorizes, and it needs no torch, so that file builds in
// a second without the precompiled header (CMakeLists.txt).
#pragma once

#include <cstdint>

namespace posenc {

/// The constants of one parameter's update at step t.
struct AdamWUpdate {
  float decay;  // 1 - lr·wd
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float sqrt_bias_correction2;  // sqrt(1 - β2^t)
  float eps;
  float neg_step_size;  // -lr / (1 - β1^t)
};

/// The update torch::optim::AdamW makes, in its order of operations, on
/// elements [begin, end) of a parameter p, its gradient g and its moments m, v:
///   p *= 1 - lr·wd;  m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;
///   p += -lr/(1-β1^t) · m / (sqrt(v)/sqrt(1-β2^t) + eps)
void adamw_update(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, const AdamWUpdate& u);

}  // namespace posenc
