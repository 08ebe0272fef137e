#include "posenc/train/finite_watch.h"

#include <fmt/format.h>

#include "posenc/train/checkpoint.h"
#include "posenc/train/run_dir.h"
#include "posenc/util/io.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

/// Writes diverged.json and throws Diverged.
[[noreturn]] void diverged(bool writes, const fs::path& dir, const Config& cfg, int64_t last_checkpoint, int64_t step,
                           const std::string& key, const std::string& what) {
  const std::string kept = last_checkpoint > 0 ? fmt::format("the last checkpoint ({}, step {}) is finite and kept",
                                                             (dir / run_files::kCheckpoint).string(), last_checkpoint)
                                               : std::string("no checkpoint was written before it");
  // Step 1's loss and gradient come from the initial weights, before any
  // update: the learning rate cannot have caused them.
  const bool before_any_update = step == 1 && key != "weights";
  const std::string message =
      before_any_update
          ? fmt::format(
                "training diverged: {} is NaN or inf at step 1, from the initial weights before any update; "
                "{}. The learning rate played no part: look at the model's options (model.positional.type={} "
                "and its options, model.d_model, model.heads){}",
                what, kept, cfg.model.positional.type,
                cfg.train.precision == Precision::Float32 ? "" : ", or use train.precision=float32")
          : fmt::format("training diverged: {} became NaN or inf at step {}; {}. Lower train.lr (now {}){}", what, step,
                        kept, cfg.train.lr,
                        cfg.train.precision == Precision::Float32
                            ? " or raise train.warmup_steps"
                            : ", raise train.warmup_steps or use train.precision=float32");
  if (writes)
    write_file_atomic((dir / run_files::kDiverged).string(), nlohmann::json{{"step", step},
                                                                            {"non_finite", key},
                                                                            {"last_checkpoint_step", last_checkpoint},
                                                                            {"message", message},
                                                                            {"config", config_to_json(cfg)}}
                                                                     .dump(2) +
                                                                 "\n");
  throw Diverged(message);
}

}  // namespace

FiniteWatch::FiniteWatch(torch::Device device, bool writes)
    : first_bad_(torch::full({2}, kNever, torch::TensorOptions().dtype(torch::kLong).device(device))),
      writes_(writes) {}

void FiniteWatch::observe(int64_t step, const torch::Tensor& loss, const torch::Tensor& grad_norm) {
  auto values = torch::stack({loss.detach().to(torch::kFloat), grad_norm.to(loss.device(), torch::kFloat)});  // (2)
  first_bad_ = torch::where(values.isfinite(), first_bad_, first_bad_.clamp_max(step));
}

void FiniteWatch::observe(const torch::Tensor& step, const torch::Tensor& loss, const torch::Tensor& grad_norm) {
  auto values = torch::stack({loss.detach().to(torch::kFloat), grad_norm.to(loss.device(), torch::kFloat)});  // (2)
  first_bad_.copy_(torch::where(values.isfinite(), first_bad_, torch::minimum(first_bad_, step)));  // in place
}

void FiniteWatch::check(const fs::path& dir, const Config& cfg, int64_t last_checkpoint) const {
  const auto bad = first_bad_.cpu();
  const int64_t loss_step = bad[0].item<int64_t>(), grad_step = bad[1].item<int64_t>();
  if (loss_step == kNever && grad_step == kNever) return;
  const bool loss_first = loss_step <= grad_step;
  diverged(writes_, dir, cfg, last_checkpoint, (loss_first ? loss_step : grad_step) + 1,  // steps are reported from 1
           loss_first ? "loss" : "grad_norm", loss_first ? "the loss" : "the gradient norm");
}

void FiniteWatch::check_weights(Transformer& model, const fs::path& dir, const Config& cfg, int64_t last_checkpoint,
                                int64_t step) const {
  const std::string name = first_non_finite_parameter(model);
  if (!name.empty()) diverged(writes_, dir, cfg, last_checkpoint, step, "weights", "parameter " + name);
}

}  // namespace posenc
