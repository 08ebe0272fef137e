// posenc eval CHECKPOINT [--lengths 8,16,...] [--samples N] [--out FILE]
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/environment.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/trainer.h"

namespace posenc::cli {

void setup_eval(CLI::App& app, EvalOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of a run")->required()->check(CLI::ExistingFile);
  app.add_option("--lengths", o.lengths, "comma-separated lengths (default: the checkpoint's eval.lengths)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("--samples", o.samples, "examples per length (0: the checkpoint's eval.samples_per_length)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  app.add_option("--out", o.out, "results file (default: results_eval.json beside the checkpoint)");
  app.add_option("--device", o.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "intra-op threads")->check(CLI::Range(1, 1024));
}

int run_eval(const EvalOptions& o) {
  const torch::Device device = resolve_device(o.device);
  set_threads(o.threads);
  log_environment();
  Config cfg;
  EncoderClassifier model = load_model(o.checkpoint, device, &cfg);
  if (o.samples > 0) cfg.eval.samples_per_length = o.samples;
  const std::vector<int64_t> lengths = o.lengths.empty() ? cfg.eval.lengths : o.lengths;
  const auto results = evaluate_lengths(model, cfg, lengths, device);
  std::printf("%s", format_length_table(results).c_str());
  const std::string out =
      o.out.empty() ? (std::filesystem::path(o.checkpoint).parent_path() / "results_eval.json").string() : o.out;
  nlohmann::json j = {{"checkpoint", o.checkpoint},
                      {"scheme", cfg.model.positional.type},
                      {"train_lengths", {cfg.task.min_length, cfg.task.max_length}},
                      {"eval_seed", cfg.eval.seed},
                      {"lengths", length_results_to_json(results)}};
  write_file_atomic(out, j.dump(2) + "\n");
  spdlog::info("wrote {}", out);
  return 0;
}

}  // namespace posenc::cli
