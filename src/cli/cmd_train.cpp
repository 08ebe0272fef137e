// posenc train CONFIG [--set path=value ...] [--out DIR] [--resume]
#include <unistd.h>

#include <cstdlib>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/environment.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"

namespace posenc::cli {

void setup_train(CLI::App& app, TrainOptions& o) {
  app.add_option("config", o.config, "JSON config (e.g. configs/ordering.json)")->required()->check(CLI::ExistingFile);
  app.add_option("--set", o.overrides, "override a config value: path=value (repeatable), e.g. train.steps=2000")
      ->allow_extra_args(false);
  app.add_option("--out", o.out, "run directory (overrides train.out_dir)")->check(non_empty_utf8("--out"));
  app.add_option("--device", o.device, "auto | cpu | cuda (overrides train.device)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "intra-op threads (overrides train.threads)")->check(integer_in(1, 1024));
  app.add_flag("--resume", o.resume, "continue the run in the run directory from its checkpoint");
  app.add_flag("--no-progress", o.no_progress, "log lines instead of the updating progress line");
}

int run_train(const TrainOptions& o) {
  const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: finish the step, checkpoint, exit 130/143
  std::vector<std::string> overrides = o.overrides;
  if (!o.out.empty()) overrides.push_back("train.out_dir=" + nlohmann::json(o.out).dump());
  if (!o.device.empty()) overrides.push_back("train.device=" + o.device);
  if (o.threads > 0) overrides.push_back("train.threads=" + std::to_string(o.threads));
  const Config cfg = load_config(o.config, overrides);
  log_environment();
  posenc::TrainRequest options;
  options.resume = o.resume;
  options.progress = !o.no_progress && ::isatty(STDERR_FILENO);
  train(cfg, options);
  return 0;
}

}  // namespace posenc::cli
