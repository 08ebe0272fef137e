#include "posenc/train/trainer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "posenc/model/transformer.h"
#include "posenc/positional/randomized.h"
#include "posenc/tasks/task.h"
#include "posenc/train/objective.h"
#include "posenc/train/autocast.h"
#include "posenc/train/grad_clip.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/finite_watch.h"
#include "posenc/train/schedule.h"
#include "posenc/util/dir_lock.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/text.h"

namespace posenc {
namespace fs = std::filesystem;

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name == "cuda") {
    if (!torch::cuda::is_available())
      throw ConfigError("train.device=cuda, but this LibTorch build sees no CUDA device (use cpu or auto)");
    return torch::kCUDA;
  }
  if (name == "auto") return torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  throw ConfigError("train.device: \"" + name + "\" is not one of auto, cpu, cuda");
}

void set_threads(int64_t threads) {
  if (torch::get_num_threads() != threads) torch::set_num_threads(static_cast<int>(threads));
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Only these may change between a checkpoint and its resumption.
void check_resume_config(const Config& now, const Config& stored, const std::string& ckpt) {
  const std::string path = first_difference(stored, now, resumable_changes());
  if (!path.empty())
    throw ConfigError("--resume: the config differs from the one stored in " + ckpt + " at " + path +
                      " (only train.steps, train.threads, train.device, train.log_every, train.out_dir and eval.* "
                      "may change)");
}

/// The running sums between two log lines and the time trained so far: kept in
/// the checkpoint so a resumed run logs and reports what an uninterrupted one would.
struct RunningState {
  double seconds_before = 0;  ///< training time of earlier segments
  double last_logged_loss = 0;
  double val_accuracy = 0;
  int64_t interval_steps = 0, seen = 0;
  double loss_sum = 0;
  int64_t correct_sum = 0;

  nlohmann::json to_json(double seconds_now) const {
    return {{"train_seconds", seconds_now}, {"last_logged_loss", last_logged_loss}, {"val_accuracy", val_accuracy},
            {"interval_steps", interval_steps}, {"seen", seen},  {"loss_sum", loss_sum},
            {"correct_sum", correct_sum}};
  }
  static RunningState from_json(const nlohmann::json& j) {
    RunningState s;
    s.seconds_before = j.value("train_seconds", 0.0);
    s.last_logged_loss = j.value("last_logged_loss", 0.0);
    s.val_accuracy = j.value("val_accuracy", 0.0);
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
  for (auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
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
    if (on_) std::fprintf(stderr, "\r\033[K%s", line.c_str());
    else spdlog::info("{}", line);
  }
  void done() {
    if (on_) std::fprintf(stderr, "\n");
  }

 private:
  bool on_;
};

}  // namespace

TrainResult train(const Config& cfg, const TrainOptions& options) {
  const torch::Device device = resolve_device(cfg.train.device);
  set_threads(cfg.train.threads);
  const fs::path dir(cfg.train.out_dir);
  const fs::path ckpt = dir / "checkpoint.pt";
  // Everything that can be checked without touching the disk, first.
  const std::unique_ptr<Task> task = make_task(cfg.task);
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  Transformer model(cfg.model, task->vocab_size());
  model->to(device);
  const int64_t randomized = cfg.model.positional.randomize_max_position;
  const int64_t longest = model->model_length(task->sequence_length(cfg.task.max_length));
  model->check_length(task->sequence_length(cfg.task.max_length));
  if (randomized > 0 && randomized < longest)
    throw ConfigError("model.positional.randomize.max_position=" + std::to_string(randomized) + " is below the " +
                      std::to_string(longest) + " positions of the longest training example (task.max_length)");
  // A length that cannot be evaluated fails now, not after the training.
  if (!options.skip_final_eval) check_evaluation_fits(model, *task, cfg, cfg.eval.lengths, device);
  if (options.resume && !fs::exists(ckpt)) throw ConfigError("--resume: no checkpoint at " + ckpt.string());
  if (fs::exists(dir / "compare.lock"))
    throw ConfigError(dir.string() + " is the output directory of a posenc compare; a train run needs a directory of "
                                     "its own (choose another --out)");
  const DirectoryLock lock(dir.string(), "train.lock", "posenc train");
  if (!options.resume) check_fresh_directory(dir, cfg);
  if (const int n = remove_stale_temporaries(dir.string()))
    spdlog::info("removed {} temporary file(s) left in {} by interrupted writes", n, dir.string());

  FusedAdamW optimizer = make_optimizer(model, cfg.train);
  int64_t start = 0;
  RunningState state;
  if (options.resume) {
    check_resume_config(cfg, read_checkpoint_config(ckpt.string()), ckpt.string());
    nlohmann::json stored;
    start = load_checkpoint(ckpt.string(), model, &optimizer, &stored);
    state = RunningState::from_json(stored);
    if (start > cfg.train.steps)
      throw ConfigError(fmt::format("--resume: {} is at step {}, past train.steps={}; raise train.steps to train on, "
                                    "or evaluate it with `posenc eval {}`",
                                    ckpt.string(), start, cfg.train.steps, ckpt.string()));
    truncate_metrics(dir / "metrics.jsonl", start);
    fs::remove(dir / kDivergedFile);  // written again if it diverges again
    spdlog::info("resuming {} at step {}{}", dir.string(), start,
                 start == cfg.train.steps ? " (already trained: evaluating it)" : "");
  } else {
    write_file_atomic((dir / "metrics.jsonl").string(), "");
  }
  write_file_atomic((dir / "config.json").string(), config_to_json(cfg).dump(2) + "\n");

  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  spdlog::info("train dir={} task={} model={} scheme={} qkv={} pooling={} params={} device={} threads={} steps={}",
               dir.string(), cfg.task.type, cfg.model.kind, cfg.model.positional.type, cfg.model.qkv,
               cfg.model.pooling, parameters, device.str(), torch::get_num_threads(), cfg.train.steps);
  AppendFile metrics((dir / "metrics.jsonl").string());
  Progress progress(options.progress);
  const auto t0 = Clock::now();
  const auto train_seconds = [&] { return state.seconds_before + seconds_since(t0); };
  auto interval_start = Clock::now();
  const auto on_device = torch::TensorOptions().device(device);
  auto loss_sum = torch::full({}, state.loss_sum, on_device.dtype(torch::kFloat));
  auto correct_sum = torch::full({}, state.correct_sum, on_device.dtype(torch::kLong));
  FiniteWatch finite(device);
  int64_t last_checkpoint = start;
  const auto save = [&](int64_t step) {
    finite.check(dir, cfg, last_checkpoint);  // never a checkpoint from non-finite weights
    finite.check_weights(model, dir, cfg, last_checkpoint, step);
    state.loss_sum = loss_sum.item<double>();
    state.correct_sum = correct_sum.item<int64_t>();
    save_checkpoint(ckpt.string(), model, &optimizer, step, cfg, state.to_json(train_seconds()));
    last_checkpoint = step;
  };
  TrainResult result;
  result.parameters = parameters;
  model->train();

  for (int64_t step = start; step < cfg.train.steps; ++step) {
    if (step + 1 == options.poison_at_step) {
      torch::NoGradGuard no_grad;
      model->parameters().front().fill_(std::numeric_limits<float>::quiet_NaN());
    }
    const double lr = learning_rate(step, cfg.train.steps, cfg.train.lr, cfg.train.warmup_steps, cfg.train.min_lr_ratio);
    set_lr(optimizer, lr);
    TaskBatch batch = task->train_batch(step, cfg.train.batch_size, cfg.train.seed);
    batch.tokens = batch.tokens.to(device);
    if (batch.labels.defined()) batch.labels = batch.labels.to(device);
    StepOutput out;
    {
      AutocastGuard autocast(cfg.train.precision == "bf16", device);
      // Randomized positions: a sorted random subset of [0, N) per batch (evaluation keeps 0..L-1).
      const auto ids = randomized > 0 ? randomized_positions(model->model_length(batch.tokens.size(1)), randomized,
                                                             cfg.train.seed, step)
                                      : torch::Tensor();
      out = task_objective(model, batch, ids);
    }
    const torch::Tensor& loss = out.loss;
    optimizer.zero_grad();
    loss.backward();
    const auto norm = cfg.train.grad_clip > 0 ? clip_grad_norm(model->parameters(), cfg.train.grad_clip)
                                              : grad_norm(model->parameters());
    optimizer.step();

    // Running sums and the finiteness watch stay on the device: no host sync inside the loop.
    finite.observe(step, loss, norm);
    loss_sum += loss.detach();
    correct_sum += out.correct;
    state.seen += out.scored;
    ++state.interval_steps;
    const int64_t done = step + 1;

    if (done % cfg.train.log_every == 0 || done == cfg.train.steps) {
      finite.check(dir, cfg, last_checkpoint);
      const double loss_avg = loss_sum.item<double>() / state.interval_steps;
      const double acc = static_cast<double>(correct_sum.item<int64_t>()) / state.seen;
      const double rate = state.interval_steps / std::max(1e-9, seconds_since(interval_start));
      metrics.write_line(nlohmann::json{{"step", done}, {"loss", loss_avg}, {"accuracy", acc}, {"lr", lr},
                                        {"steps_per_s", rate}, {"elapsed_s", train_seconds()}}
                             .dump());
      progress.update(fmt::format("step {}/{} loss {:.4f} acc {:.3f} lr {:.2e} {:.1f} steps/s ETA {}", done,
                                  cfg.train.steps, loss_avg, acc, lr, rate,
                                  format_duration((cfg.train.steps - done) / std::max(1e-9, rate))));
      state.last_logged_loss = loss_avg;
      loss_sum.zero_();
      correct_sum.zero_();
      state.seen = 0;
      state.interval_steps = 0;
      interval_start = Clock::now();
    }
    if (done % cfg.train.eval_every == 0 || done == cfg.train.steps) {
      finite.check(dir, cfg, last_checkpoint);
      const Tally val = validation_accuracy(model, *task, cfg, device);
      state.val_accuracy = val.accuracy();
      metrics.write_line(nlohmann::json{{"step", done}, {"val_accuracy", val.accuracy()}, {"val_n", val.n}}.dump());
      if (!options.progress) spdlog::info("step {} val_accuracy {:.4f} (n={})", done, val.accuracy(), val.n);
    }
    const int stop_signal = interrupt_signal();
    const bool stop = done == options.stop_at_step || stop_signal != 0;
    if (done % cfg.train.checkpoint_every == 0 || done == cfg.train.steps || stop) save(done);
    if (stop) {
      progress.done();
      spdlog::info("{} at step {}: checkpoint written to {}; continue with `posenc train {} --out {} --resume`",
                   stop_signal ? "stopped by " + signal_name(stop_signal) : std::string("stopped as asked"), done,
                   ckpt.string(), (dir / "config.json").string(), dir.string());
      if (stop_signal) throw Interrupted(stop_signal);
      result.steps = done;
      result.seconds = train_seconds();
      return result;
    }
  }
  progress.done();
  result.steps = cfg.train.steps;
  result.seconds = train_seconds();
  result.final_loss = state.last_logged_loss;
  result.val_accuracy = state.val_accuracy;
  if (start >= cfg.train.steps && state.val_accuracy == 0)
    result.val_accuracy = validation_accuracy(model, *task, cfg, device).accuracy();  // a format-1 checkpoint has no state

  result.results = {{"task", cfg.task.type},
                    {"model_kind", cfg.model.kind},
                    {"metric", metric_name(task->info().metric)},
                    {"scheme", cfg.model.positional.type},
                     {"qkv", cfg.model.qkv},
                     {"pooling", cfg.model.pooling},
                     {"seed", cfg.train.seed},
                     {"parameters", parameters},
                     {"steps", cfg.train.steps},
                     {"train_seconds", result.seconds},
                     {"final_train_loss", result.final_loss},
                     {"val_accuracy", result.val_accuracy},
                     {"train_lengths", {cfg.task.min_length, cfg.task.max_length}},
                     {"directional", model->directional()},
                     {"config", config_to_json(cfg)}};
  if (!options.skip_final_eval) {
    try {
      result.lengths = evaluate_lengths(model, *task, cfg, cfg.eval.lengths, device);
    } catch (const Interrupted& e) {
      spdlog::info("stopped by {} during the final evaluation; the trained model is in {} (step {}): `posenc train {} "
                   "--out {} --resume` evaluates it",
                   signal_name(e.signal()), ckpt.string(), cfg.train.steps, (dir / "config.json").string(),
                   dir.string());
      throw;
    }
    result.results["lengths"] = length_results_to_json(result.lengths, *task);
    std::printf("%s", format_length_table(result.lengths, *task).c_str());
  }
  write_file_atomic((dir / "results.json").string(), result.results.dump(2) + "\n");
  spdlog::info("done: {} steps in {}, val_accuracy {:.4f}; results in {}", cfg.train.steps,
               format_duration(result.seconds), result.val_accuracy, (dir / "results.json").string());
  return result;
}

}  // namespace posenc
