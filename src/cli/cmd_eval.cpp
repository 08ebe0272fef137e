// posenc eval CHECKPOINT [--lengths 8,16,...] [--samples N] [--out FILE]
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/environment.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"

namespace posenc::cli {

void setup_eval(CLI::App& app, EvalOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of a run")->required()->check(CLI::ExistingFile);
  app.add_option("--lengths", o.lengths, "comma-separated lengths (default: the checkpoint's eval.lengths)")
      ->delimiter(',')
      ->check(integer_in(2, int64_t{1} << 20));
  app.add_option("--samples", o.samples, "examples per length (0: the checkpoint's eval.samples_per_length)")
      ->check(integer_in(2, int64_t{1} << 24));
  app.add_option("--out", o.out, "results file (default: results_eval.json beside the checkpoint)")
      ->check(non_empty_utf8("--out"));
  app.add_option("--device", o.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "intra-op threads")->check(integer_in(1, 1024));
}

int run_eval(const EvalOptions& o) {
  const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: stop between batches, write nothing
  const torch::Device device = resolve_device(o.device);
  set_threads(o.threads);
  log_environment();
  Config cfg;
  EncoderClassifier model = load_model(o.checkpoint, device, &cfg);
  if (o.samples > 0) cfg.eval.samples_per_length = o.samples;
  const std::vector<int64_t> lengths = o.lengths.empty() ? cfg.eval.lengths : o.lengths;
  const std::string out =
      o.out.empty() ? (std::filesystem::path(o.checkpoint).parent_path() / "results_eval.json").string() : o.out;
  nlohmann::json j = {{"checkpoint", o.checkpoint},
                      {"scheme", cfg.model.positional.type},
                      {"train_lengths", {cfg.task.min_length, cfg.task.max_length}},
                      {"eval_seed", cfg.eval.seed}};
  check_evaluation_fits(model, cfg, lengths, device);  // every length, before the first runs
  // One length at a time: a failure at a long length keeps the shorter ones' results.
  std::vector<LengthResult> results;
  for (int64_t length : lengths) {
    try {
      results.push_back(evaluate_lengths(model, cfg, {length}, device).front());
    } catch (const Interrupted& e) {
      spdlog::warn("stopped by {} during the evaluation at length {}; no results written", signal_name(e.signal()),
                   length);
      throw;
    } catch (const std::exception& e) {
      if (results.empty()) throw;
      const std::string reason = e.what();
      j["lengths"] = length_results_to_json(results);
      j["failed"] = {{"length", length}, {"error", reason.substr(0, reason.find('\n'))}};
      write_file_atomic(out, j.dump(2) + "\n");
      std::printf("%s", format_length_table(results).c_str());
      throw std::runtime_error("evaluation at length " + std::to_string(length) + " failed: " +
                               reason.substr(0, reason.find('\n')) + "; the " + std::to_string(results.size()) +
                               " length(s) before it are in " + out);
    }
  }
  std::printf("%s", format_length_table(results).c_str());
  j["lengths"] = length_results_to_json(results);
  write_file_atomic(out, j.dump(2) + "\n");
  spdlog::info("wrote {}", out);
  return 0;
}

}  // namespace posenc::cli
