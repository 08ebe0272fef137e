// Learning-rate schedule: linear warmup, then cosine decay to lr * min_lr_ratio.
// A pure function of the step (nanoGPT's get_lr).
#pragma once

#include <cmath>
#include <cstdint>

namespace posenc {

inline double learning_rate(int64_t step, int64_t total_steps, double lr, int64_t warmup_steps, double min_lr_ratio) {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const double min_lr = lr * min_lr_ratio;
  const int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 0) return lr;
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr);
}

}  // namespace posenc
