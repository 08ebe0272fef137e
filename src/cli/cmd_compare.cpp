// posenc compare CONFIG [--jobs N] [--full] [--out DIR] [--slurm [cluster flags] | --status | --collect | --run ID]
#include <unistd.h>

#include <tuple>

#include "commands.h"
#include "posenc/environment.h"
#include "posenc/experiments/compare.h"

namespace posenc::cli {

void setup_compare(CLI::App& app, CompareOptions& o) {
  app.add_option("config", o.config, "comparison grid (e.g. configs/ordering_compare.json)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--jobs,-j", o.jobs,
                 "runs side by side (default: the number of cores; on a GPU, no more than its free memory holds)")
      ->check(integer_in(1, 1024));
  app.add_option("--threads", o.threads, "intra-op threads per run")->check(integer_as_declared("train.threads"));
  app.add_flag("--full", o.full, "use the grid's \"full\" block (more seeds and variants)");
  app.add_option("--out", o.out, "output directory (default: runs/<config name>[-full])")->check(non_empty_utf8());
  app.add_flag_callback(
      "--no-figures", [&o] { o.figures = false; }, "skip the matplotlib figures");
  o.progress = true;  // on a terminal; run_compare checks
  app.add_flag_callback(
      "--no-progress", [&o] { o.progress = false; }, "log lines instead of the updating progress line");
  app.add_option("--inspect-length", o.inspect_length, "positions shown in the scheme figures")
      ->check(integer_in(2, 4096));
  app.add_option(
         "--attention-length", o.attention_length,
         "tokens in the attention-map example (an encoder_decoder's example has its shortest evaluation length)")
      ->check(integer_in(2, 256));

  // A Slurm cluster: job arrays instead of local processes.
  auto* slurm = app.add_flag("--slurm", o.slurm,
                             "submit the runs still to do as Slurm job arrays (--jobs: at most that many at once; "
                             "--threads: CPUs per task)");
  auto* status = app.add_flag("--status", o.status, "show where each run stands (and its Slurm task); run nothing");
  auto* collect = app.add_flag("--collect", o.collect,
                               "write the summary, report and figures from the finished runs; train nothing");
  auto* run = app.add_option("--run", o.run_id, "train this one run of the grid (what each array task does)")
                  ->check(non_empty_utf8("run names"));
  slurm->excludes(status)->excludes(collect)->excludes(run);
  status->excludes(collect)->excludes(run);
  collect->excludes(run);
  using SlurmFlag = std::tuple<const char*, std::string*, const char*>;
  for (const auto& [flag, value, what] : {SlurmFlag{"--partition", &o.slurm_flags.partition, "Slurm partition"},
                                          SlurmFlag{"--time", &o.slurm_flags.time, "time limit per run, e.g. 2:00:00"},
                                          SlurmFlag{"--account", &o.slurm_flags.account, "Slurm account"}}) {
    app.add_option(flag, *value, std::string(what) + " (with --slurm; wins over the grid's \"slurm\" block)")
        ->needs(slurm)
        ->check(non_empty_utf8("Slurm settings"));
  }
  app.add_option("--gpus-per-task", o.slurm_flags.gpus_per_task,
                 "GPUs per rank of a run, 0 for none (with --slurm; wins over the grid's \"slurm\" block)")
      ->needs(slurm)
      ->check(integer_as_declared(slurm_block_key("gpus_per_task")))
      ->default_str("");  // not given: the block's (the -1 that stands for it is no value to show)
  app.add_option("--ntasks-per-run", o.slurm_flags.ntasks_per_run,
                 "ranks per run: each run trains data parallel on N Slurm tasks started with srun (with --slurm; "
                 "wins over the grid's \"slurm\" block)")
      ->needs(slurm)
      ->check(integer_as_declared(slurm_block_key("ntasks_per_run")))
      ->default_str("");
  app.add_option("--sbatch", o.slurm_flags.sbatch,
                 "another #SBATCH option for the arrays, e.g. --sbatch=--qos=low (repeatable, with --slurm; added to "
                 "the grid's \"slurm\" block's \"sbatch\")")
      ->needs(slurm)
      ->allow_extra_args(false);
}

int run_compare(const CompareOptions& o) {
  log_environment();
  CompareOptions options = o;
  options.progress = o.progress && ::isatty(STDERR_FILENO);
  return run_comparison(options);
}

}  // namespace posenc::cli
