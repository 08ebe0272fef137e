#include "posenc/train/fused_adamw.h"

#include <cmath>
#include <optional>

#include <ATen/Parallel.h>

#include "posenc/compat.h"
#include "posenc/train/adamw_update.h"

namespace posenc {
namespace {

bool fusable_tensor(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous();
}

}  // namespace

std::optional<FusedAdamW::CudaStep> FusedAdamW::fused_cuda_step() const {
  if (!compat::kHasFusedAdamwCuda) return std::nullopt;
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  std::optional<int64_t> common;
  std::optional<torch::Device> device;
  for (const auto& group : param_groups_) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) return std::nullopt;
    for (const auto& p : group.params()) {
      const auto& g = p.grad();
      if (!g.defined()) continue;
      if (!p.is_cuda() || p.scalar_type() != torch::kFloat || !p.is_contiguous() || g.device() != p.device() ||
          g.scalar_type() != torch::kFloat || !g.is_contiguous())
        return std::nullopt;
      const auto it = state_.find(compat::optimizer_state_key<Key>(p));
      int64_t taken = 0;
      if (it != state_.end() && it->second) {
        const auto& state = static_cast<const torch::optim::AdamWParamState&>(*it->second);
        if (state.exp_avg().device() != p.device() || !state.exp_avg().is_contiguous() ||
            !state.exp_avg_sq().is_contiguous())
          return std::nullopt;
        taken = state.step();
      }
      if ((common && *common != taken) || (device && *device != p.device())) return std::nullopt;
      common = taken;
      device = p.device();
    }
  }
  if (!common) return std::nullopt;
  return CudaStep{*common, *device};
}

bool FusedAdamW::fusable() const {
  for (const auto& group : param_groups_) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fusable_tensor(p) || !fusable_tensor(p.grad())) return false;
    }
  }
  return true;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  const std::optional<CudaStep> cuda_step = fused_cuda_step();
  if (!cuda_step && !fusable()) return torch::optim::AdamW::step(closure);
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  prepare_device_steps();  // the moments of parameters that have none yet
  if (cuda_step) {
    const auto t = torch::full({}, static_cast<double>(cuda_step->taken + 1),
                               torch::dtype(torch::kFloat).device(cuda_step->device));
    update_on_device(torch::Tensor(), t);
    count_steps_of_params_with_grads();
    return loss;
  }
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& state = static_cast<torch::optim::AdamWParamState&>(*state_.at(compat::optimizer_state_key<Key>(p)));
      if (!fusable_tensor(state.exp_avg()) || !fusable_tensor(state.exp_avg_sq())) {
        // e.g. moments loaded from a checkpoint in another layout
        state.exp_avg(state.exp_avg().contiguous());
        state.exp_avg_sq(state.exp_avg_sq().contiguous());
      }
      state.step(state.step() + 1);
      const double t = static_cast<double>(state.step());
      const double bias_correction1 = 1 - std::pow(beta1, t), bias_correction2 = 1 - std::pow(beta2, t);
      const AdamWUpdate u{static_cast<float>(1 - o.lr() * o.weight_decay()),
                          static_cast<float>(beta1),
                          static_cast<float>(1 - beta1),
                          static_cast<float>(beta2),
                          static_cast<float>(1 - beta2),
                          static_cast<float>(std::sqrt(bias_correction2)),
                          static_cast<float>(o.eps()),
                          static_cast<float>(-o.lr() / bias_correction1)};
      float* pd = p.data_ptr<float>();
      const float* gd = p.grad().data_ptr<float>();
      float* md = state.exp_avg().data_ptr<float>();
      float* vd = state.exp_avg_sq().data_ptr<float>();
      at::parallel_for(0, p.numel(), 1 << 16,
                       [&](int64_t begin, int64_t end) { adamw_update(pd, gd, md, vd, begin, end, u); });
    }
  }
  return loss;
}

namespace {

torch::optim::AdamWParamState& adamw_state(torch::optim::OptimizerParamState& slot) {
  return static_cast<torch::optim::AdamWParamState&>(slot);
}

}  // namespace

void FusedAdamW::prepare_device_steps() {
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  for (auto& group : param_groups_)
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state_[compat::optimizer_state_key<Key>(p)];
      if (slot) continue;
      auto fresh = std::make_unique<torch::optim::AdamWParamState>();
      fresh->step(0);
      fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
      fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
      slot = std::move(fresh);
    }
}

int64_t FusedAdamW::steps_taken() const {
  for (const auto& [key, slot] : state_)
    if (slot) return adamw_state(*slot).step();
  return 0;
}

void FusedAdamW::count_device_step() {
  for (auto& [key, slot] : state_)
    if (slot) adamw_state(*slot).step(adamw_state(*slot).step() + 1);
}

void FusedAdamW::count_steps_of_params_with_grads() {
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  for (const auto& group : param_groups_)
    for (const auto& p : group.params())
      if (p.grad().defined()) {
        auto& state = adamw_state(*state_.at(compat::optimizer_state_key<Key>(p)));
        state.step(state.step() + 1);
      }
}

void FusedAdamW::step_on_device(const torch::Tensor& lr, const torch::Tensor& t) { update_on_device(lr, t); }

void FusedAdamW::update_on_device(const torch::Tensor& shared_lr, const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "step_on_device: amsgrad is not supported");
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto it = state_.find(compat::optimizer_state_key<Key>(p));
      TORCH_CHECK(it != state_.end() && it->second, "step_on_device: call prepare_device_steps() first");
      auto& state = adamw_state(*it->second);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      steps.push_back(t);  // the kernel reads each parameter's step; all are the same
    }
    if (params.empty()) continue;
    const torch::Tensor lr = shared_lr.defined() ? shared_lr : torch::full({}, o.lr(), t.options());
    if (compat::fused_adamw_on_device(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, o.weight_decay(),
                                      o.eps()))
      continue;
    // The update of step() above, with lr and t as tensors (0-dim).
    const auto decay = 1.0 - lr * o.weight_decay();
    const auto step_size = lr / (1.0 - torch::pow(beta1, t));
    const auto sqrt_bias_correction2 = torch::sqrt(1.0 - torch::pow(beta2, t));
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].mul_(decay);
      exp_avgs[i].mul_(beta1).add_(grads[i], 1.0 - beta1);
      exp_avg_sqs[i].mul_(beta2).addcmul_(grads[i], grads[i], 1.0 - beta2);
      const auto denom = (exp_avg_sqs[i].sqrt() / sqrt_bias_correction2).add_(o.eps());
      params[i].sub_(exp_avgs[i] / denom * step_size);
    }
  }
}

}  // namespace posenc
