#include "posenc/train/trainer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "posenc/model/transformer.h"
#include "posenc/tasks/ordering.h"
#include "posenc/train/autocast.h"
#include "posenc/train/grad_clip.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/schedule.h"
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

const std::vector<std::string>& resumable_changes() {
  static const std::vector<std::string> paths = {"/train/steps", "/train/threads", "/train/device",
                                                 "/train/log_every", "/eval"};
  return paths;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Only these may change between a checkpoint and its resumption.
void check_resume_config(const Config& now, const Config& stored, const std::string& ckpt) {
  const std::string path = first_difference(stored, now, resumable_changes());
  if (!path.empty())
    throw ConfigError("--resume: the config differs from the one stored in " + ckpt + " at " + path +
                      " (only train.steps, train.threads, train.device, train.log_every and eval.* may change)");
}

/// Keeps the metrics lines of steps <= step (what a resumed run will not rewrite).
void truncate_metrics(const fs::path& file, int64_t step) {
  if (!fs::exists(file)) return;
  std::ifstream in(file);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).value("step", int64_t{0}) <= step) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
      // a line cut short by a kill: drop it
    }
  }
  write_file_atomic(file.string(), kept);
}

std::vector<torch::optim::OptimizerParamGroup> param_groups(EncoderClassifier& model, double weight_decay) {
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

FusedAdamW make_optimizer(EncoderClassifier& model, const TrainConfig& train) {
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
  if (!options.resume && fs::exists(ckpt))
    throw ConfigError(dir.string() + " already holds a run (checkpoint.pt); pass --resume to continue it or choose another --out");
  if (options.resume && !fs::exists(ckpt))
    throw ConfigError("--resume: no checkpoint at " + ckpt.string());
  fs::create_directories(dir);

  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  EncoderClassifier model(cfg.model, cfg.task.vocab_size);
  model->to(device);
  FusedAdamW optimizer = make_optimizer(model, cfg.train);
  int64_t start = 0;
  if (options.resume) {
    check_resume_config(cfg, read_checkpoint_config(ckpt.string()), ckpt.string());
    start = load_checkpoint(ckpt.string(), model, &optimizer);
    truncate_metrics(dir / "metrics.jsonl", start);
    spdlog::info("resuming {} at step {}", dir.string(), start);
  } else {
    write_file_atomic((dir / "metrics.jsonl").string(), "");
  }
  write_file_atomic((dir / "config.json").string(), config_to_json(cfg).dump(2) + "\n");

  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  spdlog::info("train dir={} scheme={} qkv={} pooling={} params={} device={} threads={} steps={}", dir.string(),
               cfg.model.positional.type, cfg.model.qkv, cfg.model.pooling, parameters, device.str(),
               torch::get_num_threads(), cfg.train.steps);

  const OrderingTask task(cfg.task);
  std::ofstream metrics(dir / "metrics.jsonl", std::ios::app);
  Progress progress(options.progress);
  const auto t0 = Clock::now();
  auto interval_start = Clock::now();
  int64_t interval_steps = 0;
  auto loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  auto correct_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device));
  int64_t seen = 0;
  TrainResult result;
  result.parameters = parameters;
  model->train();

  for (int64_t step = start; step < cfg.train.steps; ++step) {
    const double lr = learning_rate(step, cfg.train.steps, cfg.train.lr, cfg.train.warmup_steps, cfg.train.min_lr_ratio);
    set_lr(optimizer, lr);
    const Batch batch = task.train_batch(step, cfg.train.batch_size, cfg.train.seed);
    auto tokens = batch.tokens.to(device), labels = batch.labels.to(device);
    torch::Tensor logits, loss;
    {
      AutocastGuard autocast(cfg.train.precision == "bf16", device);
      logits = model->forward(tokens);  // (B, 2)
      loss = torch::nn::functional::cross_entropy(logits, labels);
    }
    optimizer.zero_grad();
    loss.backward();
    if (cfg.train.grad_clip > 0) clip_grad_norm(model->parameters(), cfg.train.grad_clip);
    optimizer.step();

    // Running sums stay on the device: no host sync inside the loop.
    loss_sum += loss.detach();
    correct_sum += logits.detach().argmax(-1).eq(labels).sum();
    seen += labels.size(0);
    ++interval_steps;
    const int64_t done = step + 1;

    if (done % cfg.train.log_every == 0 || done == cfg.train.steps) {
      const double loss_avg = loss_sum.item<double>() / interval_steps;
      const double acc = static_cast<double>(correct_sum.item<int64_t>()) / seen;
      const double rate = interval_steps / std::max(1e-9, seconds_since(interval_start));
      const double elapsed = seconds_since(t0);
      metrics << nlohmann::json{{"step", done}, {"loss", loss_avg}, {"accuracy", acc}, {"lr", lr},
                                {"steps_per_s", rate}, {"elapsed_s", elapsed}}.dump()
              << "\n" << std::flush;
      progress.update(fmt::format("step {}/{} loss {:.4f} acc {:.3f} lr {:.2e} {:.1f} steps/s ETA {}", done,
                                  cfg.train.steps, loss_avg, acc, lr, rate,
                                  format_duration((cfg.train.steps - done) / std::max(1e-9, rate))));
      result.final_loss = loss_avg;
      loss_sum.zero_();
      correct_sum.zero_();
      seen = 0;
      interval_steps = 0;
      interval_start = Clock::now();
    }
    if (done % cfg.train.eval_every == 0 || done == cfg.train.steps) {
      const Tally val = validation_accuracy(model, cfg, device);
      result.val_accuracy = val.accuracy();
      metrics << nlohmann::json{{"step", done}, {"val_accuracy", val.accuracy()}, {"val_n", val.n}}.dump() << "\n"
              << std::flush;
      if (!options.progress) spdlog::info("step {} val_accuracy {:.4f} (n={})", done, val.accuracy(), val.n);
    }
    const bool interrupted = done == options.stop_at_step;
    if (done % cfg.train.checkpoint_every == 0 || done == cfg.train.steps || interrupted)
      save_checkpoint(ckpt.string(), model, &optimizer, done, cfg);
    if (interrupted) {
      progress.done();
      spdlog::info("stopped at step {} as asked; continue with --resume", done);
      result.steps = done;
      result.seconds = seconds_since(t0);
      return result;
    }
  }
  progress.done();
  result.steps = cfg.train.steps;
  result.seconds = seconds_since(t0);
  if (start >= cfg.train.steps) {
    result.val_accuracy = validation_accuracy(model, cfg, device).accuracy();
  }

  result.results = {{"scheme", cfg.model.positional.type},
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
    result.lengths = evaluate_lengths(model, cfg, cfg.eval.lengths, device);
    result.results["lengths"] = length_results_to_json(result.lengths);
    std::printf("%s", format_length_table(result.lengths).c_str());
  }
  write_file_atomic((dir / "results.json").string(), result.results.dump(2) + "\n");
  spdlog::info("done: {} steps in {:.1f}s, val_accuracy {:.4f}; results in {}", cfg.train.steps, result.seconds,
               result.val_accuracy, (dir / "results.json").string());
  return result;
}

}  // namespace posenc
