// Shared by the CPU and CUDA tests: the fused attention path (SDPA, LibTorch
// 2.x) and the explicit one compute the same function and gradients.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "helpers.h"
#include "posenc/model/transformer.h"
#include "posenc/train/autocast.h"
#include "posenc/model/encoder.h"

namespace posenc::testing {

/// Every registered scheme whose hooks fit the fused kernel (rotations, biases, none).
inline std::vector<std::string> fused_path_schemes() {
  std::vector<std::string> names;
  for (const auto& name : scheme_names())
    if (scheme_with(name, {32, 4, 8, 0})->capabilities().fits_fused_attention()) names.push_back(name);
  return names;
}

/// max |a - b| / max |b|: one number that reads the same for logits and gradients.
inline double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-6);
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() / scale;
}

/// One training-mode forward and backward (dropout 0) through each path on
/// `device`: logits and every gradient. In float32 the two paths must agree
/// closely. Under bf16 autocast each path rounds differently, so both are held
/// to the float32 explicit result instead. The fused path is the less accurate
/// one there: measured with LibTorch 2.11 on an H100 and on the CPU (the same
/// numbers on both), its gradients for sinusoidal, whose content + position
/// scores are large, are up to 0.19 of the largest gradient away from float32,
/// where the explicit path (softmax in float32 under autocast) is 0.01-0.02
/// away; for the other schemes the two are about equal. The bound, 0.25 or 5x
/// the explicit path's error, still fails on a wrong mask or layout (~1).
inline void expect_fused_matches_explicit(const std::string& scheme, torch::Device device, bool bf16) {
  torch::manual_seed(0);
  const Config c = config_with({"model.positional.type=\"" + scheme + "\"", "model.dropout=0"});
  Encoder model(c.model, task_vocab_size(c.task));
  model->to(device);
  model->train();
  const auto tokens = torch::randint(1, task_vocab_size(c.task) + 1, {3, 24}, torch::kLong).to(device);
  auto run = [&](bool force_explicit, bool autocast_on) {
    model->force_explicit_attention(force_explicit);
    model->zero_grad();
    torch::Tensor logits;
    {
      AutocastGuard autocast(autocast_on, device);
      logits = model->forward(tokens);
    }
    logits.to(torch::kFloat).pow(2).sum().backward();
    std::vector<torch::Tensor> out{logits.detach().to(torch::kFloat).cpu()};
    for (const auto& p : model->parameters())
      if (p.grad().defined()) out.push_back(p.grad().detach().cpu());
    return out;
  };
  const auto fused = run(false, bf16), explicit_path = run(true, bf16);
  ASSERT_EQ(fused.size(), explicit_path.size()) << scheme;
  const std::string where = scheme + " on " + device.str() + (bf16 ? " (bf16 autocast)" : " (float32)");
  if (!bf16) {
    EXPECT_LE(relative_error(fused[0], explicit_path[0]), tolerance::kFloat32Model) << where << ": logits";
    for (size_t i = 1; i < fused.size(); ++i)
      EXPECT_LE(relative_error(fused[i], explicit_path[i]), tolerance::kFloat32Gradient) << where << ": gradient " << i;
    return;
  }
  const auto reference = run(true, false);
  for (size_t i = 0; i < fused.size(); ++i) {
    const double e_fused = relative_error(fused[i], reference[i]);
    const double e_explicit = relative_error(explicit_path[i], reference[i]);
    EXPECT_LE(e_fused, std::max(5 * e_explicit, 0.25))
        << where << (i == 0 ? ": logits" : ": gradient " + std::to_string(i)) << " (explicit bf16 is off by "
        << e_explicit << ")";
  }
}

}  // namespace posenc::testing
