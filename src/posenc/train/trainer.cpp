#include "posenc/train/fits.h"
#include "posenc/train/trainer.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "posenc/environment.h"
#include "posenc/model/transformer.h"
#include "posenc/positional/randomized.h"
#include "posenc/tasks/task.h"
#include "posenc/train/objective.h"
#include "posenc/train/autocast.h"
#include "posenc/train/grad_clip.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/cuda_graphs.h"
#include "posenc/train/data_parallel.h"
#include "posenc/train/finite_watch.h"
#include "posenc/train/schedule.h"
#include "posenc/train/deterministic.h"
#include "posenc/util/dir_lock.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/text.h"
#include "posenc/util/io.h"
#include "posenc/util/output_guard.h"
#include "posenc/util/tensor_values.h"

namespace posenc {
namespace fs = std::filesystem;

torch::Device resolve_device(Device device, const std::string& flag) {
  switch (device) {
    case Device::Cpu: return torch::kCPU;
    case Device::Cuda:
      if (!torch::cuda::is_available())
        throw DeviceError(flag + (flag.rfind("--", 0) == 0 ? " " : "=") +
                          "cuda, but this LibTorch build sees no CUDA device (use cpu or auto)");
      return torch::kCUDA;
    case Device::Auto: break;
  }
  return torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
}

torch::Device resolve_device(const std::string& name, const std::string& flag) {
  Device device = Device::Auto;
  try {
    device = choice_from_name<Device>(name);
  } catch (const ConfigError& e) {
    throw ConfigError(flag + ": " + e.what());
  }
  return resolve_device(device, flag);
}

void set_threads(int64_t threads) {
  if (torch::get_num_threads() != threads) torch::set_num_threads(static_cast<int>(threads));
}

namespace {

using Clock = std::chrono::steady_clock;

/// One GPU per local rank.
torch::Device rank_device(Device name, const Launch& launch) {
  const torch::Device device = resolve_device(name);
  if (!device.is_cuda() || !launch.distributed()) return device;
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (launch.local_rank >= gpus)
    throw DeviceError(
        fmt::format("rank {} is local rank {} on its machine, which has {} CUDA device(s): start at "
                    "most one rank per GPU",
                    launch.rank, launch.local_rank, gpus));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(launch.local_rank));
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Only these may change between a checkpoint and its resumption.
void check_resume_config(const Config& now, const Config& stored, const std::string& ckpt) {
  const std::string path = first_difference(stored, now, resumable_changes());
  if (!path.empty())
    throw ConfigError("--resume: the config differs from the one stored in " + ckpt + " at " + path + " (only " +
                      resumable_changes_text() + " may change)");
}

/// The running sums between two log lines and the time trained so far: kept in
/// the checkpoint so a resumed run logs and reports what an uninterrupted one would.
struct RunningState {
  double seconds_before = 0;  ///< training time of earlier segments
  double last_logged_loss = 0;
  double val_accuracy = 0;
  bool validation_pending = false;  ///< a signal stopped the validation of the checkpoint's step
  int64_t interval_steps = 0, seen = 0;
  double loss_sum = 0;
  int64_t correct_sum = 0;

  nlohmann::json to_json(double seconds_now) const {
    return {{"train_seconds", seconds_now},
            {"last_logged_loss", last_logged_loss},
            {"val_accuracy", val_accuracy},
            {"validation_pending", validation_pending},
            {"interval_steps", interval_steps},
            {"seen", seen},
            {"loss_sum", loss_sum},
            {"correct_sum", correct_sum}};
  }
  static RunningState from_json(const nlohmann::json& j) {
    RunningState s;
    s.seconds_before = j.value("train_seconds", 0.0);
    s.last_logged_loss = j.value("last_logged_loss", 0.0);
    s.val_accuracy = j.value("val_accuracy", 0.0);
    s.validation_pending = j.value("validation_pending", false);
    s.interval_steps = j.value("interval_steps", int64_t{0});
    s.seen = j.value("seen", int64_t{0});
    s.loss_sum = j.value("loss_sum", 0.0);
    s.correct_sum = j.value("correct_sum", int64_t{0});
    return s;
  }
};

std::vector<torch::optim::OptimizerParamGroup> param_groups(Transformer& model, double weight_decay) {
  // Decay matrices and tables; not biases and LayerNorm gains (nanoGPT's rule).
  std::vector<torch::Tensor> decay, no_decay;
  // Parameters held fixed (train.trainable) are not the optimizer's.
  for (auto& p : model->parameters())
    if (p.requires_grad()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto with_decay = std::make_unique<torch::optim::AdamWOptions>();
  with_decay->weight_decay(weight_decay);
  auto without_decay = std::make_unique<torch::optim::AdamWOptions>();
  without_decay->weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::move(with_decay));
  groups.emplace_back(no_decay, std::move(without_decay));
  return groups;
}

}  // namespace

void check_batch_divides(const TrainConfig& train, int ranks) {
  if (train.batch_size % ranks != 0)
    throw ConfigError(
        fmt::format("train.batch_size={} does not divide among the {} ranks: each rank trains on an "
                    "equal slice of every batch (use a multiple of {})",
                    train.batch_size, ranks, ranks));
}

StepOutput device_step(Transformer& model, const TaskBatch& batch, int64_t scored, FusedAdamW& optimizer,
                       const torch::Tensor& lr, const torch::Tensor& t, double grad_clip, bool bf16,
                       torch::Tensor& norm) {
  for (auto& p : model->parameters())
    if (p.grad().defined()) p.grad().zero_();
  StepOutput out;
  {
    AutocastGuard autocast(bf16, lr.device());
    out = task_objective(model, batch, torch::Tensor(), scored);
  }
  out.loss.backward();
  norm = grad_clip > 0 ? clip_grad_norm(model->parameters(), grad_clip) : grad_norm(model->parameters());
  optimizer.prepare_device_steps();  // creates the moments on a first (eager) call only
  optimizer.step_on_device(lr, t);
  return out;
}

FusedAdamW make_optimizer(Transformer& model, const TrainConfig& train) {
  return FusedAdamW(param_groups(model, train.weight_decay),
                    torch::optim::AdamWOptions(train.lr).weight_decay(train.weight_decay));
}

namespace {

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

class Progress {
 public:
  explicit Progress(bool on) : on_(on) {}
  void update(const std::string& line) {
    if (on_)
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
    else
      spdlog::info("{}", line);
  }
  void done() {
    if (on_) std::fprintf(stderr, "\n");
  }

 private:
  bool on_;
};

}  // namespace

TrainHooks TrainHooks::from_environment() {
  TrainHooks hooks;
  if (const char* poison = std::getenv("POSENC_POISON_STEP")) hooks.poison_at_step = std::atoll(poison);
  return hooks;
}

namespace {

/// One call of train(): what the named steps below share.
class TrainingRun {
 public:
  /// A batch shape's static inputs for its CUDA graph (graphed_step).
  struct StaticBatch {
    TaskBatch batch;
    int64_t scored = 0;
  };

  TrainingRun(const Config& cfg, const TrainRequest& request, const TrainHooks& hooks)
      : cfg_(cfg),
        request_(request),
        hooks_(hooks),
        rank_(request.launch.rank),
        world_(request.launch.world_size),
        device_(rank_device(cfg.train.device, request.launch)),
        dir_(cfg.train.out_dir),
        ckpt_(dir_ / run_files::kCheckpoint),
        task_(make_task(cfg.task)),
        model_(nullptr) {}

  /// A fresh run that fails before its first checkpoint (and did not diverge)
  /// removes the config.json and metrics.jsonl it wrote, so that the same
  /// command, corrected, can use the directory again.
  ~TrainingRun() {
    if (std::uncaught_exceptions() == 0) return;
    // Refused before anything was written (a held directory, another run's
    // files): the lock file and the directory this run created go too.
    if (!started_files_ && lock_) lock_->remove_if_created();
    if (!started_files_) return;  // only rank 0 starts them
    std::error_code ec;
    if (fs::exists(ckpt_, ec) || fs::exists(dir_ / run_files::kDiverged, ec)) return;
    metrics_.reset();
    fs::remove(dir_ / run_files::kConfig, ec);
    fs::remove(dir_ / run_files::kMetrics, ec);
  }

  /// Builds the model and checks everything that can be checked without
  /// touching the disk, then takes the directory's lock.
  void setup() {
    // The one output guard: not the root or a kernel directory, not a file,
    // somewhere a file can be written (what may be replaced inside is
    // check_fresh_directory's, under the lock).
    OutputDirectory where;
    where.flag = "train.out_dir (--out)";
    where.writer = "posenc train";
    check_output_directory(dir_.string(), where);
    if (rank_ == 0 && cfg_.train.warmup_steps > cfg_.train.steps)
      spdlog::warn(
          "train.warmup_steps={} is more than train.steps={}: the learning rate rises for the whole run and "
          "ends at {:.3g}, not train.lr={:.3g}",
          cfg_.train.warmup_steps, cfg_.train.steps,
          learning_rate(cfg_.train.steps - 1, cfg_.train.steps, cfg_.train.lr, cfg_.train.warmup_steps,
                        cfg_.train.min_lr_ratio),
          cfg_.train.lr);
    set_threads(cfg_.train.threads);
    if (cfg_.train.deterministic) {
      deterministic_.emplace(device_);  // before the first kernel of the run
      if (rank_ == 0) spdlog::info("train.deterministic: LibTorch's deterministic kernels are on for this run");
    }
    torch::manual_seed(static_cast<uint64_t>(cfg_.train.seed));
    check_model_fits(cfg_.model, task_->vocab_size(), device_);  // before a byte of it is allocated
    model_ = Transformer(cfg_.model, task_->vocab_size());
    model_->to(device_);
    const int64_t randomized = cfg_.model.positional.randomize_max_position;
    const int64_t longest = model_->model_length(task_->sequence_length(cfg_.task.max_length));
    model_->check_length(task_->sequence_length(cfg_.task.max_length),
                         evaluation_spec(cfg_).training_positions_end > 0);
    if (randomized > 0 && randomized < longest)
      throw ConfigError("model.positional.randomize.max_position=" + std::to_string(randomized) + " is below the " +
                        std::to_string(longest) + " positions of the longest training example (task.max_length)");
    record_data_identity();
    check_batch_divides(cfg_.train, world_);
    check_training_fits(model_, task_->sequence_length(cfg_.task.max_length), cfg_.train.batch_size / world_, device_,
                        task_->widest_data());
    // A length that cannot be evaluated fails now, not after the training: the
    // validation sets (of up to task.max_length) and the final evaluation's.
    task_->check_training_lengths(cfg_.task.min_length, cfg_.task.max_length);
    if (!request_.skip_final_eval)
      check_evaluation_fits(model_, *task_, evaluation_spec(cfg_), cfg_.eval.lengths, device_);
    // The ranks join before anything that can fail on one rank alone (a held
    // lock, a missing checkpoint): the others then fail at their next
    // collective at once instead of waiting for the rendezvous to time out.
    if (world_ > 1)
      ranks_ = std::make_unique<DataParallel>(request_.launch, cfg_.train.backend, device_, cfg_.train.bucket_mb,
                                              cfg_.train.collective_timeout_s);
    if (request_.resume && !fs::exists(ckpt_))
      throw ConfigError("--resume: no checkpoint at " + ckpt_.string() +
                        (rank_ > 0 ? " (every rank reads it: the run directory must be on a filesystem that all "
                                     "ranks see)"
                                   : ""));
    if (fs::exists(dir_ / run_files::kCompareLock))
      throw ConfigError(dir_.string() +
                        " is the output directory of a posenc compare; a train run needs a directory "
                        "of its own (choose another --out)");
    if (rank_ == 0) {  // the one writer holds the directory
      lock_ = std::make_unique<DirectoryLock>(dir_.string(), run_files::kTrainLock, "posenc train");
      if (!request_.resume) check_fresh_directory(dir_, cfg_);
      if (const int n = remove_stale_temporaries(dir_.string()))
        spdlog::info("removed {} temporary file(s) left in {} by interrupted writes", n, dir_.string());
    }
    // --resume reads every weight from the run's own checkpoint instead.
    if (!request_.resume && !cfg_.train.init_from.empty()) start_from_checkpoint();
    if (cfg_.train.trainable == Trainable::HeadScale)
      for (auto& p : model_->named_parameters())
        if (!is_head_scale(p.key())) p.value().set_requires_grad(false);
    optimizer_ = std::make_unique<FusedAdamW>(make_optimizer(model_, cfg_.train));
    graphed_ = use_cuda_graphs();
  }

  /// train.init_from: the checkpoint's weights in place of train.seed's.
  void start_from_checkpoint() {
    const std::vector<std::string> kept = init_weights_from(cfg_.train.init_from, model_);
    if (rank_ == 0)
      spdlog::info("train.init_from: weights from {}{}", cfg_.train.init_from,
                   kept.empty() ? std::string()
                                : fmt::format("; {} parameter(s) it lacks keep their initialization ({})", kept.size(),
                                              join(kept, ", ")));
  }

  /// train.cuda_graphs: auto captures where it can, on insists (a ConfigError
  /// saying why not), off never does.
  bool use_cuda_graphs() const {
    const CudaGraphs mode = cfg_.train.cuda_graphs;
    if (mode == CudaGraphs::Off) return false;
    std::string why_not;
    if (!device_.is_cuda())
      why_not = "CUDA graphs need train.device cuda (this run is on " + device_.str() + ")";
    else if (!cuda_graphs_compiled())
      why_not =
          "this posenc was built without CUDA graph support (configure it with -DPOSENC_CUDA=ON against a "
          "CUDA LibTorch)";
    else if (world_ > 1)
      why_not = "a data parallel run all-reduces its gradients on the host's schedule between backward and update";
    else if (task_->info().padded)
      why_not = "task " + cfg_.task.type + " pads its batches to lengths and answer counts that change every batch";
    else if (cfg_.model.positional.randomize_max_position > 0)
      why_not = "randomized positions are drawn on the host each step and the model reads the largest of them";
    else if (evaluation_spec(cfg_).training_positions_end > 0)
      why_not = "the task's position ids (task.positions) are drawn on the host each step and read there";
    else if (!model_->capturable())
      why_not = "scheme " + cfg_.model.positional.type + " decides on the host from each batch's data";
    if (why_not.empty()) return true;
    if (mode == CudaGraphs::On) throw ConfigError("train.cuda_graphs=on: " + why_not + " (use auto or off)");
    if (device_.is_cuda()) spdlog::info("CUDA graphs off: {}", why_not);
    return false;
  }

  /// A task read from a file (charlm) records the file's size and checksum in
  /// the run's config (its path is already absolute); a resume refuses a text
  /// that is no longer the one the checkpoint was trained on.
  void record_data_identity() {
    const nlohmann::json identity = task_->data_identity();
    if (identity.empty()) return;
    if (request_.resume && fs::exists(ckpt_)) {
      const nlohmann::json recorded = read_checkpoint_config(ckpt_.string()).task.options.json();
      if (recorded.value("bytes", int64_t{0}) == 0) return;  // trained before posenc recorded it
      for (const auto& [key, value] : identity.items())
        if (recorded.at(key) != value)
          throw ConfigError(fmt::format(
              "--resume: task.path {} is not the text {} was trained on (task.{} {} recorded, {} now); put the "
              "original text back, or start a new run",
              cfg_.task.options.get_string("path"), ckpt_.string(), key, recorded.at(key).dump(), value.dump()));
    }
    nlohmann::json options = cfg_.task.options.json();
    options.update(identity);
    cfg_.task.options = Options(options);
  }

  /// Continues from the checkpoint (--resume) or starts the run's files afresh.
  void resume_or_start() {
    if (request_.resume) {
      check_resume_config(cfg_, read_checkpoint_config(ckpt_.string()), ckpt_.string());
      nlohmann::json stored;
      start_ = load_checkpoint(ckpt_.string(), model_, optimizer_.get(), &stored);
      state_ = RunningState::from_json(stored);
      if (rank_ > 0) state_.seen = 0;  // the window's sums so far are rank 0's to carry
      if (start_ > cfg_.train.steps)
        throw ConfigError(
            fmt::format("--resume: {} is at step {}, past train.steps={}; raise train.steps to train "
                        "on, or evaluate it with `posenc eval {}`",
                        ckpt_.string(), start_, cfg_.train.steps, ckpt_.string()));
      if (rank_ == 0) resume_average();
      if (rank_ == 0) {
        truncate_metrics(dir_ / run_files::kMetrics, start_);
        fs::remove(dir_ / run_files::kDiverged);  // written again if it diverges again
      }
      spdlog::info("resuming {} at step {}{}", dir_.string(), start_,
                   start_ == cfg_.train.steps ? " (already trained: evaluating it)" : "");
    } else if (rank_ == 0) {
      write_file_atomic((dir_ / run_files::kMetrics).string(), "");
      started_files_ = true;
    }
    if (rank_ == 0) write_file_atomic((dir_ / run_files::kConfig).string(), config_to_json(cfg_).dump(2) + "\n");
    int64_t trainable = 0;
    for (const auto& p : model_->parameters()) {
      parameters_ += p.numel();
      if (p.requires_grad()) trainable += p.numel();
    }
    spdlog::info(
        "train dir={} task={} model={} scheme={} qkv={}{} params={}{} device={} threads={} steps={}{}", dir_.string(),
        cfg_.task.type, name_of(cfg_.model.kind), cfg_.model.positional.type, name_of(cfg_.model.qkv),
        cfg_.model.kind == ModelKind::Encoder ? " pooling=" + name_of(cfg_.model.pooling)
                                              : std::string(),  // only an encoder pools
        parameters_, trainable < parameters_ ? fmt::format(" (trained: {})", trainable) : std::string(), device_.str(),
        torch::get_num_threads(), cfg_.train.steps,
        ranks_ ? fmt::format(" ranks={} backend={} (launched by {})", world_, ranks_->backend(), request_.launch.source)
               : std::string());
    if (rank_ == 0) metrics_ = std::make_unique<AppendFile>((dir_ / run_files::kMetrics).string());
    if (ranks_) join_ranks();
    const auto on_device = torch::TensorOptions().device(device_);
    // The window's sums carried over from a checkpoint live on rank 0 alone.
    loss_sum_ = torch::full({}, rank_ == 0 ? state_.loss_sum : 0.0, on_device.dtype(torch::kFloat));
    correct_sum_ = torch::full({}, rank_ == 0 ? state_.correct_sum : 0, on_device.dtype(torch::kLong));
    last_checkpoint_ = start_;
    started_ = Clock::now();
    interval_start_ = Clock::now();
    model_->train();
    if (state_.validation_pending) validate(start_, /*due=*/true);  // the one a signal stopped
  }

  int64_t start() const { return start_; }

  /// Every rank starts from rank 0's weights (equal already when each built the
  /// model from train.seed or read the same checkpoint: this makes it so).
  /// Dropout draws a stream of its own on each rank.
  void join_ranks() {
    std::vector<torch::Tensor> state = model_->parameters();
    for (const auto& b : model_->buffers()) state.push_back(b);
    ranks_->broadcast_from_rank0(state);
    if (rank_ > 0) torch::manual_seed(static_cast<uint64_t>(cfg_.train.seed + 1000003 * rank_ + start_));
  }

  /// schedule -> batch -> forward -> backward -> clip -> AdamW. The running
  /// sums and the finiteness watch stay on the device: no host sync here.
  void step(int64_t step) {
    if (graphed_) return graphed_step(step);
    if (step + 1 == hooks_.poison_at_step) {
      torch::NoGradGuard no_grad;
      model_->parameters().front().fill_(std::numeric_limits<float>::quiet_NaN());
    }
    const TrainConfig& t = cfg_.train;
    lr_ = learning_rate(step, t.steps, t.lr, t.warmup_steps, t.min_lr_ratio);
    set_lr(*optimizer_, lr_);
    TaskBatch batch = task_->train_batch(step, t.batch_size, t.seed);  // the global batch, the same on every rank
    // Padded answers (SCAN, translation) give the ranks' slices different numbers of
    // scored tokens: weight each slice's mean loss by its share of the global batch's
    // tokens, so that the ranks' averaged gradients are those of the global mean loss.
    const double slice_weight =
        world_ > 1 && batch.padded ? static_cast<double>(world_) / static_cast<double>(scored_predictions(batch)) : 1.0;
    batch = shard_rows(batch, rank_, world_);          // this rank's slice of the global batch
    const int64_t scored = scored_predictions(batch);  // read on the CPU, before the batch moves
    batch.tokens = batch.tokens.to(device_);
    if (batch.labels.defined()) batch.labels = batch.labels.to(device_);
    StepOutput out;
    {
      AutocastGuard autocast(t.precision == Precision::Bf16, device_);
      // Randomized positions: a sorted random subset of [0, N) per batch (evaluation keeps 0..L-1).
      const int64_t randomized = cfg_.model.positional.randomize_max_position;
      const auto ids = randomized > 0
                           ? randomized_positions(model_->model_length(batch.tokens.size(1)), randomized, t.seed, step)
                           : torch::Tensor();
      out = task_objective(model_, batch, ids, scored);
    }
    // The slices' mean of (weighted) mean losses is the global batch's mean loss,
    // so the ranks' averaged gradients are its gradients.
    if (slice_weight != 1.0) out.loss = out.loss * (slice_weight * static_cast<double>(scored));
    optimizer_->zero_grad();
    out.loss.backward();
    if (ranks_) agreed_signal_ = ranks_->average_gradients(model_->parameters(), interrupt_signal());
    const auto norm =
        t.grad_clip > 0 ? clip_grad_norm(model_->parameters(), t.grad_clip) : grad_norm(model_->parameters());
    optimizer_->step();
    finite_.observe(step, out.loss, norm);
    loss_sum_ += out.loss.detach() / world_;
    correct_sum_ += out.correct;
    state_.seen += out.scored;
    ++state_.interval_steps;
  }

  /// The same step, captured as a CUDA graph per batch shape (tokens and labels)
  /// and replayed: the batch is copied into that shape's static tensors, the
  /// learning rate and the step numbers into 0-dim device tensors, and the
  /// graph does the rest: gradients zeroed in place, forward, backward,
  /// clipping, AdamW (FusedAdamW::step_on_device), the finiteness watch and
  /// the log window's sums. The first call of a shape runs eagerly, the second
  /// captures it. No data parallelism, no padding, no randomized positions
  /// (use_cuda_graphs), so `scored` is fixed by the shape.
  void graphed_step(int64_t step) {
    if (step + 1 == hooks_.poison_at_step) {
      torch::NoGradGuard no_grad;
      model_->parameters().front().fill_(std::numeric_limits<float>::quiet_NaN());
    }
    const TrainConfig& t = cfg_.train;
    lr_ = learning_rate(step, t.steps, t.lr, t.warmup_steps, t.min_lr_ratio);
    set_lr(*optimizer_, lr_);  // what a checkpoint records
    const TaskBatch batch = task_->train_batch(step, t.batch_size, t.seed);
    std::string key;  // the batch's shapes, e.g. "64x12/64"
    for (const auto& part : {batch.tokens, batch.labels}) {
      if (!part.defined()) continue;
      if (!key.empty()) key += "/";
      for (int64_t d = 0; d < part.dim(); ++d) key += (d ? "x" : "") + std::to_string(part.size(d));
    }
    auto [it, fresh] = static_batches_.try_emplace(key);
    StaticBatch& in = it->second;
    if (fresh) {  // this shape's static tensors, allocated outside any capture
      in.batch = batch;
      in.batch.tokens = batch.tokens.to(device_);
      if (batch.labels.defined()) in.batch.labels = batch.labels.to(device_);
      in.scored = scored_predictions(batch);
    } else {  // from pinned memory, without waiting for the GPU
      in.batch.tokens.copy_(batch.tokens.pin_memory(), /*non_blocking=*/true);
      if (batch.labels.defined()) in.batch.labels.copy_(batch.labels.pin_memory(), /*non_blocking=*/true);
    }
    if (!lr_now_.defined()) {
      const auto f32 = torch::TensorOptions().device(device_).dtype(torch::kFloat);
      lr_now_ = torch::zeros({}, f32);
      update_now_ = torch::zeros({}, f32);
      step_now_ = torch::zeros({}, f32.dtype(torch::kLong));
    }
    lr_now_.fill_(lr_);
    update_now_.fill_(static_cast<double>(optimizer_->steps_taken() + 1));
    step_now_.fill_(step);
    graphs_.run(key, [&] { step_body(in); });
    optimizer_->count_device_step();
    state_.seen += in.scored;
    ++state_.interval_steps;
  }

  /// What graphed_step captures: device work only, on static tensors.
  void step_body(const StaticBatch& in) {
    torch::Tensor norm;
    const StepOutput out = device_step(model_, in.batch, in.scored, *optimizer_, lr_now_, update_now_,
                                       cfg_.train.grad_clip, cfg_.train.precision == Precision::Bf16, norm);
    finite_.observe(step_now_, out.loss, norm);
    loss_sum_ += out.loss.detach();
    correct_sum_ += out.correct;
  }

  /// A metrics line and the progress line every log_every steps (and at the end).
  void log(int64_t done) {
    if (done % cfg_.train.log_every != 0 && done != cfg_.train.steps) return;
    finite_.check(dir_, cfg_, last_checkpoint_);
    const WindowSums sums = window_sums();
    const double loss_avg = sums.loss / state_.interval_steps;
    const double acc = sums.correct / sums.seen;
    const double rate = state_.interval_steps / std::max(1e-9, seconds_since(interval_start_));
    state_.last_logged_loss = loss_avg;
    loss_sum_.zero_();
    correct_sum_.zero_();
    state_.seen = 0;
    state_.interval_steps = 0;
    interval_start_ = Clock::now();
    if (rank_ > 0) return;
    metrics_->write_line(nlohmann::json{
        {"step", done},
        {"loss", loss_avg},
        {"accuracy", acc},
        {"lr", lr_},
        {"steps_per_s", rate},
        {"elapsed_s",
         train_seconds()}}.dump());
    progress_.update(fmt::format("step {}/{} loss {:.4f} acc {:.3f} lr {:.2e} {:.1f} steps/s ETA {}", done,
                                 cfg_.train.steps, loss_avg, acc, lr_, rate,
                                 format_duration((cfg_.train.steps - done) / std::max(1e-9, rate))));
  }

  /// In-distribution validation every eval_every steps (and at the end).
  /// A stop request ends it between batches: checkpoint() then saves this step
  /// with the validation pending, and the resumed run does it first.
  void validate(int64_t done, bool due = false) {
    if (!due && done % cfg_.train.eval_every != 0 && done != cfg_.train.steps) return;
    finite_.check(dir_, cfg_, last_checkpoint_);
    Tally val;
    const auto t0 = Clock::now();
    if (ranks_) {
      // Each rank scores its share; a signal waits for the next step's all-reduce.
      val = validation_accuracy(model_, *task_, evaluation_spec(cfg_), device_, /*interruptible=*/false, rank_, world_);
      const auto total = ranks_->sum({static_cast<double>(val.n), static_cast<double>(val.correct)});
      val.n = static_cast<int64_t>(total[0]);
      val.correct = static_cast<int64_t>(total[1]);
    } else {
      try {
        val = validation_accuracy(model_, *task_, evaluation_spec(cfg_), device_, /*interruptible=*/true);
      } catch (const Interrupted&) {
        state_.validation_pending = true;
        return;
      }
    }
    state_.validation_pending = false;
    state_.val_accuracy = val.accuracy();
    if (rank_ > 0) return;
    metrics_->write_line(nlohmann::json{
        {"step", done}, {"val_accuracy", val.accuracy()}, {"val_n", val.n}, {"val_seconds", seconds_since(t0)}}
                             .dump());
    if (!request_.progress) spdlog::info("step {} val_accuracy {:.4f} (n={})", done, val.accuracy(), val.n);
  }

  /// A checkpoint every checkpoint_every steps, at the end, and when asked to
  /// stop. Returns true when the run stops here (throws Interrupted for a signal).
  bool checkpoint(int64_t done) {
    // Ranks stop at the step they agreed on in its gradient all-reduce.
    const int stop_signal = ranks_ ? agreed_signal_ : interrupt_signal();
    const bool stop = done == request_.stop_at_step || stop_signal != 0;
    if (done % cfg_.train.checkpoint_every == 0 || done == cfg_.train.steps || stop) save(done);
    if (!stop) return false;
    progress_.done();
    if (rank_ > 0) {
      spdlog::info("rank {} stopped at step {} with rank 0, which wrote the checkpoint", rank_, done);
      if (stop_signal) throw Interrupted(stop_signal);
      return true;
    }
    spdlog::info("{} at step {}: checkpoint written to {}; continue with `posenc train {} --out {} --resume`",
                 stop_signal ? "stopped by " + signal_name(stop_signal) : std::string("stopped as asked"), done,
                 ckpt_.string(), (dir_ / run_files::kConfig).string(), dir_.string());
    if (stop_signal) throw Interrupted(stop_signal);
    return true;
  }

  /// The result of a run stopped before train.steps (no evaluation, no results file).
  TrainResult stopped(int64_t done) const {
    TrainResult result;
    result.parameters = parameters_;
    result.steps = done;
    result.seconds = train_seconds();
    return result;
  }

  /// The evaluation at eval.lengths and results.json.
  TrainResult finish() {
    progress_.done();
    TrainResult result = stopped(cfg_.train.steps);
    if (rank_ > 0) return result;  // rank 0 evaluates and writes the results
    result.final_loss = state_.last_logged_loss;
    result.val_accuracy = state_.val_accuracy;
    if (start_ >= cfg_.train.steps && state_.val_accuracy == 0)  // a format-1 checkpoint has no state
      result.val_accuracy = validation_accuracy(model_, *task_, evaluation_spec(cfg_), device_).accuracy();
    result.results = results_json(result);
    // train.average_from: the mean weights are what is scored.
    Transformer& scored = average_ ? average_ : model_;
    if (average_) {
      result.results["averaged_weights"] = {{"checkpoints", average_count_},
                                            {"from_step", cfg_.train.average_from},
                                            {"file", (dir_ / run_files::kAverage).string()}};
      spdlog::info("evaluating the mean of the weights at {} checkpoint steps from step {} ({})", average_count_,
                   cfg_.train.average_from, (dir_ / run_files::kAverage).string());
    }
    // model.attention.head_scale: the lambda each head ended at, per attention module.
    nlohmann::json scales = nlohmann::json::object();
    for (const auto& p : scored->named_parameters())
      if (is_head_scale(p.key())) scales[p.key()] = tensor_values(p.value());
    if (!scales.empty()) result.results["head_scale"] = scales;
    if (!request_.skip_final_eval) {
      try {
        result.lengths = evaluate_lengths(scored, *task_, evaluation_spec(cfg_), cfg_.eval.lengths, device_);
      } catch (const Interrupted& e) {
        spdlog::info(
            "stopped by {} during the final evaluation; the trained model is in {} (step {}): `posenc train "
            "{} --out {} --resume` evaluates it",
            signal_name(e.signal()), ckpt_.string(), cfg_.train.steps, (dir_ / run_files::kConfig).string(),
            dir_.string());
        throw;
      }
      result.results["lengths"] = length_results_to_json(result.lengths);
      if (task_->info().bleu) result.results["bleu"] = corpus_bleu_json(result.lengths);
      std::printf("%s", format_length_table(result.lengths, *task_).c_str());
      std::printf("%s", format_wrong_answers(result.lengths).c_str());  // eval.wrong_answers
      if (!cfg_.eval.operand_grid.empty()) {
        const OperandGrid grid =
            evaluate_operand_grid(scored, *task_, evaluation_spec(cfg_), cfg_.eval.operand_grid, device_);
        result.results["operand_grid"] = operand_grid_to_json(grid);
        std::printf("%s", format_operand_grid(grid).c_str());
      }
    }
    write_file_atomic((dir_ / run_files::kResults).string(), result.results.dump(2) + "\n");
    spdlog::info("done: {} steps in {}, val_accuracy {:.4f}; results in {}", cfg_.train.steps,
                 format_duration(result.seconds), result.val_accuracy, (dir_ / run_files::kResults).string());
    if (ranks_)
      spdlog::info("rank 0 spent {:.1f} s of this segment's {:.1f} s in gradient all-reduces ({} ranks, {})",
                   ranks_->allreduce_seconds(), seconds_since(started_), world_, ranks_->backend());
    return result;
  }

 private:
  double train_seconds() const { return state_.seconds_before + seconds_since(started_); }

  /// The log window's sums over all ranks (a collective: every rank calls it at the same step).
  struct WindowSums {
    double loss = 0, correct = 0, seen = 0;
  };
  WindowSums window_sums() {
    WindowSums w{loss_sum_.item<double>(), static_cast<double>(correct_sum_.item<int64_t>()),
                 static_cast<double>(state_.seen)};
    if (!ranks_) return w;
    const auto all = ranks_->sum({w.loss, w.correct, w.seen});
    return {all[0], all[1], all[2]};
  }

  void save(int64_t step) {
    finite_.check(dir_, cfg_, last_checkpoint_);  // never a checkpoint from non-finite weights
    finite_.check_weights(model_, dir_, cfg_, last_checkpoint_, step);
    const WindowSums sums = window_sums();
    state_.loss_sum = sums.loss;
    state_.correct_sum = static_cast<int64_t>(sums.correct);
    if (rank_ > 0) {
      last_checkpoint_ = step;
      return;
    }
    save_checkpoint(ckpt_.string(), model_, optimizer_.get(), step, cfg_, state_.to_json(train_seconds()));
    last_checkpoint_ = step;
    if (averages(step)) add_to_average(step);
  }

  /// train.average_from: the steps whose weights enter the mean (a checkpoint
  /// step from average_from on, and the last); not a stop at another step.
  bool averages(int64_t step) const {
    const int64_t from = cfg_.train.average_from;
    return from > 0 && step >= from && (step % cfg_.train.checkpoint_every == 0 || step == cfg_.train.steps);
  }

  /// The running mean takes the weights of `step` (mean += (w - mean) / n, so
  /// that a resumed run continues it exactly) and is written to average.pt.
  void add_to_average(int64_t step) {
    if (step <= average_step_) return;
    torch::NoGradGuard no_grad;
    if (!average_) average_ = model_for_weights();
    ++average_count_;
    auto mean = average_->named_parameters();
    for (const auto& p : model_->named_parameters()) {
      auto& m = mean[p.key()];
      if (average_count_ == 1)
        m.copy_(p.value());
      else
        m.add_((p.value() - m) / static_cast<double>(average_count_));
    }
    average_step_ = step;
    save_checkpoint((dir_ / run_files::kAverage).string(), average_, nullptr, step, cfg_,
                    {{"average_count", average_count_}, {"average_from", cfg_.train.average_from}});
  }

  /// A model of this run's config to hold other weights, built without a draw
  /// from the global generator: its initial weights are overwritten, and the
  /// training's dropout stream must stay what it would be without it.
  Transformer model_for_weights() const {
    auto& cpu = const_cast<torch::Generator&>(at::globalContext().defaultGenerator(torch::kCPU));
    const torch::Tensor state = cpu.get_state();
    Transformer model(cfg_.model, task_->vocab_size());
    cpu.set_state(state);
    model->to(device_);
    return model;
  }

  /// --resume: the mean so far from average.pt; the checkpoint's own weights
  /// join it if the run stopped after writing the checkpoint and before the mean.
  void resume_average() {
    if (cfg_.train.average_from <= 0) return;
    const fs::path path = dir_ / run_files::kAverage;
    if (fs::exists(path)) {
      average_ = model_for_weights();
      nlohmann::json stored;
      average_step_ = load_checkpoint(path.string(), average_, nullptr, &stored);
      average_count_ = stored.value("average_count", int64_t{0});
      if (average_count_ <= 0 || average_step_ > start_)
        throw ConfigError("--resume: " + path.string() + " does not belong to the checkpoint at step " +
                          std::to_string(start_) + " (its mean reaches step " + std::to_string(average_step_) +
                          "); remove it only if the run may start its average anew");
    }
    if (averages(start_)) add_to_average(start_);
  }

  nlohmann::json results_json(const TrainResult& r) const {
    return {{"task", cfg_.task.type},
            {"model_kind", cfg_.model.kind},
            {"metric", metric_name(task_->info().metric)},
            {"scheme", cfg_.model.positional.type},
            {"qkv", cfg_.model.qkv},
            {"pooling", cfg_.model.pooling},
            {"seed", cfg_.train.seed},
            {"parameters", parameters_},
            {"steps", cfg_.train.steps},
            {"train_seconds", r.seconds},
            {"final_train_loss", r.final_loss},
            {"val_accuracy", r.val_accuracy},
            {"train_lengths", {cfg_.task.min_length, cfg_.task.max_length}},
            {"directional", model_->directional()},
            {"ranks", world_},
            // this segment's time in the gradient all-reduces (copies included)
            {"allreduce_seconds", ranks_ ? ranks_->allreduce_seconds() : 0.0},
            // what the numbers depend on beyond the config: a rerun elsewhere matches only where these do
            {"environment", numeric_environment(device_.str())},
            {"config", config_to_json(cfg_)}};
  }

  Config cfg_;  // a copy: training records the data identity in it
  const TrainRequest& request_;
  const TrainHooks& hooks_;
  const int rank_, world_;
  const torch::Device device_;
  std::optional<DeterministicKernels> deterministic_;  // train.deterministic, for the run's lifetime
  const fs::path dir_, ckpt_;
  const std::unique_ptr<Task> task_;
  Transformer model_;
  Transformer average_{nullptr};  ///< train.average_from: the mean weights so far (rank 0)
  int64_t average_count_ = 0, average_step_ = 0;
  std::unique_ptr<DirectoryLock> lock_;
  std::unique_ptr<FusedAdamW> optimizer_;
  std::unique_ptr<DataParallel> ranks_;  // null for one process
  int agreed_signal_ = 0;                // the stop signal the ranks agreed on at the last step
  std::unique_ptr<AppendFile> metrics_;
  Progress progress_{request_.progress && rank_ == 0};
  FiniteWatch finite_{device_, /*writes=*/rank_ == 0};
  RunningState state_;
  torch::Tensor loss_sum_, correct_sum_;  // the log window's sums, on the device
  int64_t start_ = 0, last_checkpoint_ = 0, parameters_ = 0;
  bool started_files_ = false;  ///< this process wrote the run's first config.json and metrics.jsonl
  double lr_ = 0;
  Clock::time_point started_, interval_start_;
  // CUDA graphs (graphed_step): one per batch shape, with its static inputs.
  bool graphed_ = false;
  GraphCache graphs_;
  std::map<std::string, StaticBatch> static_batches_;
  torch::Tensor lr_now_, update_now_, step_now_;  // 0-dim, on the device
};

}  // namespace

TrainResult train(const Config& cfg, const TrainRequest& request) {
  return train_with_hooks(cfg, request, TrainHooks::from_environment());
}

TrainResult train_with_hooks(const Config& cfg, const TrainRequest& request, const TrainHooks& hooks) {
  TrainingRun run(cfg, request, hooks);
  run.setup();
  run.resume_or_start();
  for (int64_t step = run.start(); step < cfg.train.steps; ++step) {
    run.step(step);
    const int64_t done = step + 1;
    run.log(done);
    run.validate(done);
    if (run.checkpoint(done)) return run.stopped(done);
  }
  return run.finish();
}

}  // namespace posenc
