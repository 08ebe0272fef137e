// posenc eval CHECKPOINT [--lengths 8,16,...] [--samples N] [--set path=value ...] [--out FILE]
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/environment.h"
#include "posenc/tasks/registry.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluation_changes.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/fits.h"
#include "posenc/train/run_dir.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/io.h"
#include "posenc/util/output_guard.h"

namespace posenc::cli {
namespace {

constexpr const char* kEvalWriter = "posenc eval";

/// Results files of eval from before the "written_by" key: their own set of keys.
bool written_by_an_older_eval(const nlohmann::json& j) {
  return j.contains("checkpoint") && j.contains("eval_seed") && j.contains("train_lengths") && !j.contains("config");
}

}  // namespace
namespace {

/// --average: the model's parameters replaced by their mean over its
/// checkpoint and `others` (a uniform weight average, as stochastic weight
/// averaging takes it over the checkpoints of one run). Each must hold the
/// model and task `stored` (the checkpoint's own config; training and
/// evaluation settings may differ) and is loaded as `cfg` (with --set's changes).
void average_weights(Transformer& model, const Config& stored, const Config& cfg, const std::string& checkpoint,
                     const std::vector<std::string>& others, torch::Device device) {
  if (others.empty()) return;
  torch::NoGradGuard no_grad;
  auto mine = model->named_parameters();
  for (const auto& path : others) {
    const std::string differs = first_difference(read_checkpoint_config(path), stored, {"/train", "/eval"});
    if (!differs.empty())
      throw ConfigError("--average " + path + ": not the model of " + checkpoint + " (their configs differ at " +
                        differs + ")");
    const Transformer other = load_model_as(path, device, cfg);
    for (const auto& p : other->named_parameters()) mine[p.key()].add_(p.value());
  }
  for (auto& p : mine) p.value().div_(static_cast<double>(others.size() + 1));
}

}  // namespace

void setup_eval(CLI::App& app, EvalOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of a run")->required()->check(CLI::ExistingFile);
  add_lengths_option(app, "--lengths", o.lengths, "comma-separated lengths (default: the checkpoint's eval.lengths)");
  add_list_option(app, "--average", o.average,
                  "comma-separated checkpoints of the same model whose weights are averaged with the checkpoint's "
                  "before evaluating (e.g. one run's last few)",
                  CLI::ExistingFile);
  app.add_option("--set", o.overrides,
                 "evaluation-time change of the stored config that adds or removes no parameter (repeatable): " +
                     allowed_evaluation_changes() + "; e.g. model.positional.scaling=yarn")
      ->allow_extra_args(false);
  app.add_option("--samples", o.samples,
                 "examples per length, at least 2 (default: the checkpoint's eval.samples_per_length)")
      ->check(integer_as_declared("eval.samples_per_length"));
  app.add_option("--out", o.out, "results file (default: results_eval.json beside the checkpoint)")
      ->check(non_empty_utf8());
  app.add_option("--device", o.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "intra-op threads")->check(integer_as_declared("train.threads"));
}

int run_eval(const EvalOptions& o) {
  const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: stop between batches, write nothing
  const torch::Device device = resolve_device(o.device, "--device");
  set_threads(o.threads);
  log_environment();
  const Config stored = read_checkpoint_config(o.checkpoint);
  Config cfg = o.overrides.empty() ? stored : with_evaluation_changes(stored, o.overrides);
  Transformer model = [&] {
    try {
      return load_model_as(o.checkpoint, device, cfg);
    } catch (const ConfigError& e) {
      if (o.overrides.empty()) throw;
      throw ConfigError(std::string(e.what()) + "; --set may change only options that add or remove no parameter");
    }
  }();
  average_weights(model, stored, cfg, o.checkpoint, o.average, device);
  if (o.samples > 0) cfg.eval.samples_per_length = o.samples;
  const std::vector<int64_t> lengths = o.lengths.empty() ? cfg.eval.lengths : o.lengths;
  const std::string out =
      o.out.empty() ? (std::filesystem::path(o.checkpoint).parent_path() / run_files::kEvalResults).string() : o.out;
  // Without --out the results go beside the checkpoint: an error there names that place, not a flag not given.
  check_output_target(out, o.out.empty() ? "the default output (no --out given)" : "--out", kEvalWriter,
                      written_by_an_older_eval);
  const std::unique_ptr<Task> task = make_task(cfg.task);
  check_data_identity(*task, cfg, o.overrides);
  nlohmann::json j = {{kWrittenBy, kEvalWriter},
                      {"checkpoint", o.checkpoint},
                      {"task", cfg.task.type},
                      {"metric", metric_name(task->info().metric)},
                      {"scheme", cfg.model.positional.type},
                      {"train_lengths", {cfg.task.min_length, cfg.task.max_length}},
                      {"eval_seed", cfg.eval.seed},
                      {"overrides", o.overrides},
                      {"averaged_with", o.average},
                      {"positional", config_to_json(cfg)["model"]["positional"]},
                      {"environment", numeric_environment(device.str())}};
  check_evaluation_fits(model, *task, evaluation_spec(cfg), lengths, device);  // every length, before the first runs
  // One length at a time: a failure at a long length keeps the shorter ones' results.
  std::vector<LengthResult> results;
  for (int64_t length : lengths) {
    try {
      results.push_back(evaluate_lengths(model, *task, evaluation_spec(cfg), {length}, device).front());
    } catch (const Interrupted& e) {
      spdlog::warn("stopped by {} during the evaluation at length {}; no results written", signal_name(e.signal()),
                   length);
      throw;
    } catch (const std::exception& e) {
      if (results.empty()) throw;
      const std::string reason = e.what();
      j["lengths"] = length_results_to_json(results);
      if (task->info().bleu) j["bleu"] = corpus_bleu_json(results);
      j["failed"] = {{"length", length}, {"error", reason.substr(0, reason.find('\n'))}};
      write_file_atomic(out, j.dump(2) + "\n");
      std::printf("%s", format_length_table(results, *task).c_str());
      throw std::runtime_error("evaluation at length " + std::to_string(length) +
                               " failed: " + reason.substr(0, reason.find('\n')) + "; the " +
                               std::to_string(results.size()) + " length(s) before it are in " + out);
    }
  }
  std::printf("%s", format_length_table(results, *task).c_str());
  std::printf("%s", format_wrong_answers(results).c_str());  // eval.wrong_answers; whole in the results file
  j["lengths"] = length_results_to_json(results);
  if (task->info().bleu) j["bleu"] = corpus_bleu_json(results);
  if (!cfg.eval.operand_grid.empty()) {  // a checkpoint's own, or --set eval.operand_grid=[...]
    const OperandGrid grid = evaluate_operand_grid(model, *task, evaluation_spec(cfg), cfg.eval.operand_grid, device);
    j["operand_grid"] = operand_grid_to_json(grid);
    std::printf("%s", format_operand_grid(grid).c_str());
  }
  write_file_atomic(out, j.dump(2) + "\n");
  spdlog::info("wrote {}", out);
  return 0;
}

}  // namespace posenc::cli
