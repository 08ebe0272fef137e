// posenc bench [CONFIG] [--sizes small,large] [--schemes rope,alibi] [--no-python] [--bf16]
#include "commands.h"
#include "posenc/bench/bench.h"
#include "posenc/environment.h"

namespace posenc::cli {

void setup_bench(CLI::App& app, BenchOptions& o) {
  app.add_option("config", o.config, "bench file")->check(CLI::ExistingFile);
  add_list_option(app, "--sizes", o.sizes, "only these sizes (names in the bench file)");
  add_list_option(app, "--schemes", o.schemes, "only these scheme entries");
  app.add_option("--threads", o.threads, "intra-op threads (both sides)")->check(integer_as_declared("train.threads"));
  app.add_option("--device", o.device, "cpu | cuda | auto")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_flag("--bf16", o.bf16, "autocast the forward pass to bfloat16");
  app.add_option("--attention", o.attention, "auto (fused SDPA where the scheme allows, LibTorch 2.x) | explicit")
      ->check(CLI::IsMember({"auto", "explicit"}));
  app.add_flag_callback(
      "--no-python", [&o] { o.python = false; }, "skip the PyTorch-eager side (scripts/bench_eager.py)");
  app.add_option("--out", o.out, "output directory")->check(non_empty_utf8());
}

int run_bench(const BenchOptions& o) {
  log_environment();
  return run_benchmark(o);
}

}  // namespace posenc::cli
