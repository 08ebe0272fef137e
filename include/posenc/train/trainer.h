// The training loop: schedule -> batch -> forward -> backward -> clip -> step
// -> log -> validate -> checkpoint, then the extrapolation evaluation.
//
// A run directory holds config.json (resolved), metrics.jsonl, checkpoint.pt
// and results.json (diverged.json instead when the loss or the gradient norm
// went NaN/inf), and train.lock while a process trains it. --resume continues
// from checkpoint.pt bit-for-bit: each batch is a pure function of (seed, step)
// and the dropout RNG and the running sums are checkpointed.
//
// SIGINT/SIGTERM (util/interrupt.h) finish the current step, write the
// checkpoint and throw Interrupted; non-finite values are caught without a
// per-step host sync (the first bad step is kept on the device and read at log
// intervals, validations and checkpoints) and end the run with Diverged,
// leaving the last finite checkpoint in place.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/transformer.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/finite_watch.h"
#include "posenc/train/fused_adamw.h"
#include "posenc/train/objective.h"
#include "posenc/train/run_dir.h"
#include "posenc/util/launch.h"

namespace posenc {

/// How to run one training (the config says what to train).
struct TrainRequest {
  bool resume = false;
  /// One updating terminal line instead of log lines.
  bool progress = false;
  /// Skip the evaluation at eval.lengths after training.
  bool skip_final_eval = false;
  /// Stop (with a checkpoint, without results) once this step is done, as if
  /// the run were killed there; 0 = run to train.steps.
  int64_t stop_at_step = 0;
  /// This process's place among the ranks of a data parallel run (launch.h);
  /// one process by default.
  Launch launch;
};

/// Test seams: faults that a test injects into a run. Production code never
/// fills this; from_environment() reads POSENC_POISON_STEP, the seam through
/// which the CLI tests reach a `posenc train` process (as POSENC_FAIL_WRITE
/// does for util/io.h).
struct TrainHooks {
  /// Before this step (counted from 1), the first weight tensor is set to NaN,
  /// as a diverging run would do on its own; 0 = never.
  int64_t poison_at_step = 0;
  static TrainHooks from_environment();
};

struct TrainResult {
  int64_t steps = 0;
  double seconds = 0;
  double final_loss = 0;
  double val_accuracy = 0;
  int64_t parameters = 0;
  std::vector<LengthResult> lengths;
  nlohmann::json results;  ///< what results.json holds
};

/// "auto" -> CUDA when available; "cuda" without CUDA is a DeviceError.
torch::Device resolve_device(Device device, const std::string& flag = "train.device");
/// The same for a command-line flag's value ("cpu", "cuda", "auto"); errors name `flag`.
torch::Device resolve_device(const std::string& name, const std::string& flag);

/// AdamW at train.lr, decaying matrices and tables but not biases and LayerNorm gains.
FusedAdamW make_optimizer(Transformer& model, const TrainConfig& train);

/// One training step with nothing read back to the host, as a CUDA graph
/// captures it (train/cuda_graphs.h; the trainer's graphed steps and `posenc
/// bench`'s "graph ms"): gradients zeroed in place (a graph holds their
/// addresses), the forward under bf16 autocast if asked, the backward, the
/// gradient-norm clip (grad_clip > 0), and AdamW with the learning rate and
/// the update's number read from `lr` and `t` (0-dim float32 on the device;
/// FusedAdamW::step_on_device). `batch` is on the model's device and `scored`
/// its scored_predictions(). Returns the objective's output; `norm` receives
/// the gradient norm before clipping.
StepOutput device_step(Transformer& model, const TaskBatch& batch, int64_t scored, FusedAdamW& optimizer,
                       const torch::Tensor& lr, const torch::Tensor& t, double grad_clip, bool bf16,
                       torch::Tensor& norm);

/// Each of `ranks` data parallel ranks trains on an equal slice of every
/// batch: a ConfigError naming both numbers if train.batch_size does not divide.
void check_batch_divides(const TrainConfig& train, int ranks);

/// Applies the thread count (intra-op) once per process.
void set_threads(int64_t threads);

/// Trains cfg in cfg.train.out_dir (resuming from its checkpoint if asked),
/// then evaluates at cfg.eval.lengths and writes results.json.
///
/// With request.launch.world_size > 1 the ranks train one model together
/// (train/data_parallel.h): each takes its slice of every global batch
/// (train.batch_size must divide evenly), validation is split over them, and
/// only rank 0 writes (metrics, checkpoints, results) and runs the final
/// evaluation; the other ranks return once training is done. Every rank reads
/// the checkpoint on --resume, with any number of ranks.
TrainResult train(const Config& cfg, const TrainRequest& request);

/// train() with faults a test injects (TrainHooks); train(cfg, request) is
/// this with the hooks of the environment (POSENC_POISON_STEP).
TrainResult train_with_hooks(const Config& cfg, const TrainRequest& request, const TrainHooks& hooks);

}  // namespace posenc
