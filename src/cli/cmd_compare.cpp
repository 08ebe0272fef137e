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
  app.add_option("--jobs,-j", o.jobs, "runs side by side (default: number of cores)")->check(integer_in(1, 1024));
  app.add_option("--threads", o.threads, "intra-op threads per run")->check(integer_in(1, 1024));
  app.add_flag("--full", o.full, "use the grid's \"full\" block (more seeds and variants)");
  app.add_option("--out", o.out, "output directory (default: runs/<config name>[-full])")
      ->check(non_empty_utf8("--out"));
  app.add_flag_callback(
      "--no-figures", [&o] { o.figures = false; }, "skip the matplotlib figures");
  o.progress = true;  // on a terminal; run_compare checks
  app.add_flag_callback(
      "--no-progress", [&o] { o.progress = false; }, "log lines instead of the updating progress line");
  app.add_option("--inspect-length", o.inspect_length, "positions shown in the scheme figures")
      ->check(integer_in(2, 4096));
  app.add_option("--attention-length", o.attention_length, "tokens in the attention-map example")
      ->check(integer_in(2, 256));
}

int run_compare(const CompareOptions& o) {
  log_environment();
  CompareOptions options = o;
  options.progress = o.progress && ::isatty(STDERR_FILENO);
  return run_comparison(options);
}

}  // namespace posenc::cli
