// posenc: train, evaluate and compare positional encodings.
// The only place that configures logging; every error ends in one line and a non-zero exit.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/environment.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/fork_server.h"
#include "posenc/util/io.h"
#include "posenc/util/output_guard.h"
#include "posenc/util/text.h"

void posenc::cli::check_json_target(const std::string& path, const std::string& command) {
  if (!path.empty()) posenc::check_output_target(path, "--json", "posenc " + command);
}

void posenc::cli::emit_json(nlohmann::json j, const std::string& path, const std::string& command) {
  if (path.empty()) {
    std::fputs((j.dump() + "\n").c_str(), stdout);
    return;
  }
  check_json_target(path, command);  // again: the file may have appeared meanwhile
  if (j.is_object()) j[posenc::kWrittenBy] = "posenc " + command;
  posenc::write_file_atomic(path, j.dump() + "\n");
}

namespace {

/// One subcommand: its name and help, how it binds its flags, how it runs.
struct Command {
  const char* name;
  const char* help;
  std::function<void(CLI::App&)> setup;
  std::function<int()> run;
};

/// A Command over its own options struct, which setup fills and run reads.
template <class Options>
Command command(const char* name, const char* help, void (*setup)(CLI::App&, Options&), int (*run)(const Options&)) {
  auto options = std::make_shared<Options>();
  return {name, help, [setup, options](CLI::App& app) { setup(app, *options); },
          [run, options] { return run(*options); }};
}

std::vector<Command> commands() {
  using namespace posenc::cli;
  return {
      command("train", "train a model from a JSON config, then evaluate it", setup_train, run_train),
      command("eval", "evaluate a checkpoint at a list of lengths", setup_eval, run_eval),
      command("generate", "continue a text prompt with a language-model checkpoint (task charlm)", setup_generate,
              run_generate),
      command("translate", "translate a source (--input or --file) with an encoder_decoder checkpoint", setup_translate,
              run_translate),
      command("list",
              "list the config keys, positional schemes and tasks, with their options, and the keys of grid and bench "
              "files",
              setup_list, run_list),
      command(
          "inspect",
          "write what a scheme contributes (at initialization, or trained) as JSON; scripts/plot_inspect.py draws it",
          setup_inspect, run_inspect),
      command("compare", "run a grid of schemes x attention x pooling x seeds; summary, figures, report", setup_compare,
              run_compare),
      command("attention",
              "write a trained model's attention maps on one example as JSON; scripts/plot_inspect.py draws them",
              setup_attention, run_attention),
      command("probe",
              "fit linear probes of each token's position (or a quantity its task defines) to a trained model's "
              "residual stream, layer by layer",
              setup_probe, run_probe),
      command("heads",
              "where each attention head looks, over many examples at each length: mass left, on and right of the "
              "query, mean distance, flatness",
              setup_heads, run_heads),
      command("bench", "time, memory and FLOPs per scheme, against the matmul peak and PyTorch eager", setup_bench,
              run_bench),
  };
}

/// The exit status of a command, every error ending in one line on stderr
/// after whatever the command printed.
int run_to_exit_status(const Command& c) {
  const auto error = [](const char* what) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", what);
  };
  try {
    return c.run();
  } catch (const posenc::Interrupted& e) {
    return e.exit_code();  // what was stopped and what was kept has been logged where it happened
  } catch (const posenc::Diverged& e) {
    error(e.what());
    return posenc::kExitDiverged;
  } catch (const posenc::ConfigError& e) {
    error(e.what());
    return posenc::kExitBadInput;
  } catch (const posenc::LockError& e) {
    error(e.what());  // another posenc works in that directory: nothing was started
    return posenc::kExitBadInput;
  } catch (const posenc::DeviceError& e) {
    error(e.what());
    return posenc::kExitBadInput;
  } catch (const c10::Error& e) {
    error(e.what_without_backtrace());
    return posenc::kExitFailure;
  } catch (const std::exception& e) {
    error(e.what());
    return posenc::kExitFailure;
  } catch (...) {
    error("an unexpected failure (no message)");
    return posenc::kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The test suite's fork server (posenc/util/fork_server.h): it loads the
  // libraries once and forks; each child goes on from here with its own argv.
  std::vector<std::string> forked_args;
  std::vector<char*> forked_argv;
  if (const char* socket = std::getenv(posenc::kForkServerVariable)) {
    forked_args = posenc::serve_forks(socket);
    for (auto& arg : forked_args) forked_argv.push_back(arg.data());
    forked_argv.push_back(nullptr);
    argc = static_cast<int>(forked_args.size());
    argv = forked_argv.data();
  }
  // A reader of stdout that goes away (`posenc train ... | head`) must not kill
  // a run between checkpoints: writes to the closed pipe fail quietly instead,
  // and the run goes on to its checkpoint and results.
  ::signal(SIGPIPE, SIG_IGN);
  posenc::use_the_cpus_blas_kernels();
  posenc::tune_malloc_for_training();
  posenc::flush_denormals();
  CLI::App app{"posenc: study positional encodings in transformers"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "debug logging");
  app.set_version_flag("--version", posenc::version_line(), "print posenc's commit and LibTorch's version, then exit");
  const std::vector<Command> all = commands();
  std::vector<std::string> names;
  for (const auto& c : all) {
    c.setup(*app.add_subcommand(c.name, c.help));
    names.push_back(c.name);
  }

  // A misspelt command gets its own message (CLI11 would say "A subcommand is required").
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;
    if (std::find(names.begin(), names.end(), arg) != names.end()) break;
    std::fprintf(stderr, "error: unknown command \"%s\"; the commands are %s (posenc --help)\n", arg.c_str(),
                 posenc::join(names, ", ").c_str());
    return posenc::kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; every bad flag, value or file named on the command line exits 2,
    // as for a bad config (CLI11's own codes, 105-109, would say nothing to a script).
    if (e.get_exit_code() == 0) return app.exit(e);
    // One "error: " line like every other refusal of posenc, then where to look.
    std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", e.what());
    return posenc::kExitBadInput;
  }

  spdlog::set_default_logger(spdlog::stderr_color_mt("posenc"));
  spdlog::set_pattern("%H:%M:%S %^%l%$ %v");
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);

  if (!posenc::die_with_parent()) {
    std::fprintf(stderr, "error: the posenc compare that started this process is gone\n");
    return 1;
  }
  for (const auto& c : all)
    if (app.got_subcommand(c.name)) return run_to_exit_status(c);
  return 1;
}
