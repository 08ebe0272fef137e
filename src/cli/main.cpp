// posenc: train, evaluate and compare positional encodings.
// The only place that configures logging; every error ends in one line and a non-zero exit.
#include <csignal>
#include <cstdio>
#include <functional>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/environment.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/io.h"
#include "posenc/util/output_guard.h"

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

int main(int argc, char** argv) {
  // A reader of stdout that goes away (`posenc train ... | head`) must not kill
  // a run between checkpoints: writes to the closed pipe fail quietly instead,
  // and the run goes on to its checkpoint and results.
  ::signal(SIGPIPE, SIG_IGN);
  posenc::tune_malloc_for_training();
  posenc::flush_denormals();
  CLI::App app{"posenc: study positional encodings in transformers"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "debug logging");

  posenc::cli::TrainOptions train;
  posenc::cli::EvalOptions eval;
  posenc::cli::GenerateOptions generate;
  posenc::cli::TranslateOptions translate;
  posenc::cli::ListOptions list;
  posenc::cli::InspectOptions inspect;
  posenc::CompareOptions compare;
  posenc::cli::AttentionOptions attention;
  posenc::BenchOptions bench;
  posenc::cli::setup_train(*app.add_subcommand("train", "train a model from a JSON config, then evaluate it"), train);
  posenc::cli::setup_eval(*app.add_subcommand("eval", "evaluate a checkpoint at a list of lengths"), eval);
  posenc::cli::setup_generate(
      *app.add_subcommand("generate", "continue a text prompt with a language-model checkpoint (task charlm)"),
      generate);
  posenc::cli::setup_translate(
      *app.add_subcommand("translate", "translate a source (--input or --file) with an encoder_decoder checkpoint"),
      translate);
  posenc::cli::setup_list(*app.add_subcommand("list", "list positional schemes and tasks, with their options"), list);
  posenc::cli::setup_inspect(
      *app.add_subcommand("inspect", "write what a scheme contributes at initialization as JSON"), inspect);
  posenc::cli::setup_compare(
      *app.add_subcommand("compare", "run a grid of schemes x attention x pooling x seeds; summary, figures, report"),
      compare);
  posenc::cli::setup_attention(
      *app.add_subcommand("attention", "write a trained model's attention maps on one example as JSON"), attention);
  posenc::cli::setup_bench(
      *app.add_subcommand("bench", "time, memory and FLOPs per scheme, against the matmul peak and PyTorch eager"),
      bench);

  // A misspelt command gets its own message (CLI11 would say "A subcommand is required").
  const std::function<bool(CLI::App*)> every = [](CLI::App*) { return true; };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;
    std::string known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands(every)) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      found = found || sub->get_name() == arg;
    }
    if (found) break;
    std::fprintf(stderr, "error: unknown command \"%s\"; the commands are %s (posenc --help)\n", arg.c_str(),
                 known.c_str());
    return posenc::kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every bad flag, value or file named on the command line exits 2,
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
  // Whatever a command printed comes before its error line.
  const auto error = [](const char* what) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", what);
  };
  try {
    if (app.got_subcommand("train")) return posenc::cli::run_train(train);
    if (app.got_subcommand("eval")) return posenc::cli::run_eval(eval);
    if (app.got_subcommand("generate")) return posenc::cli::run_generate(generate);
    if (app.got_subcommand("translate")) return posenc::cli::run_translate(translate);
    if (app.got_subcommand("list")) return posenc::cli::run_list(list);
    if (app.got_subcommand("inspect")) return posenc::cli::run_inspect(inspect);
    if (app.got_subcommand("compare")) return posenc::cli::run_compare(compare);
    if (app.got_subcommand("attention")) return posenc::cli::run_attention(attention);
    if (app.got_subcommand("bench")) return posenc::cli::run_bench(bench);
  } catch (const posenc::Interrupted& e) {
    // What was stopped and what was kept has been logged where it happened.
    return e.exit_code();
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
  return 1;
}
