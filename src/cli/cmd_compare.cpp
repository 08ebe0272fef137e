// posenc compare CONFIG [--jobs N] [--full] [--out DIR]
#include <unistd.h>

#include "commands.h"
#include "posenc/environment.h"
#include "posenc/experiments/compare.h"

namespace posenc::cli {

void setup_compare(CLI::App& app, CompareOptions& o) {
  app.add_option("config", o.config, "comparison grid (e.g. configs/ordering_compare.json)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--jobs,-j", o.jobs, "runs side by side (default: number of cores)")->check(CLI::Range(1, 1024));
  app.add_option("--threads", o.threads, "intra-op threads per run")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  app.add_flag("--full", o.full, "use the grid's \"full\" block (more seeds and variants)");
  app.add_option("--out", o.out, "output directory (default: runs/<config name>[-full])");
  app.add_flag("--no-figures", o.no_figures, "skip the matplotlib figures");
  app.add_flag("--no-progress", o.no_progress, "log lines instead of the updating progress line");
  app.add_option("--inspect-length", o.inspect_length, "positions shown in the scheme figures")
      ->check(CLI::Range(int64_t{2}, int64_t{4096}));
  app.add_option("--attention-length", o.attention_length, "tokens in the attention-map example")
      ->check(CLI::Range(int64_t{2}, int64_t{256}));
}

int run_compare(const CompareOptions& o) {
  log_environment();
  posenc::CompareOptions options;
  options.config = o.config;
  options.out = o.out;
  options.jobs = o.jobs;
  options.threads = o.threads;
  options.full = o.full;
  options.progress = !o.no_progress && ::isatty(STDERR_FILENO);
  options.figures = !o.no_figures;
  options.inspect_length = o.inspect_length;
  options.attention_length = o.attention_length;
  return run_comparison(options);
}

}  // namespace posenc::cli
