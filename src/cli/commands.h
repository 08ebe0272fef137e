// The CLI subcommands: each has an options struct, setup_x(CLI::App&) that
// declares its flags, and run_x(const XOptions&) that does the work.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "posenc/bench/bench.h"
#include "posenc/experiments/compare.h"

namespace posenc::cli {

/// A flag's value must be an integer in [min, max]; the message says which of
/// the two it is not ("'abc' is not an integer", "5000 is out of range [1, 1024]").
CLI::Validator integer_in(int64_t min, int64_t max);

/// A flag that stands for a config key (`--threads` for train.threads,
/// `--lengths` for eval.lengths, `--samples` for eval.samples_per_length) takes
/// what the key's declaration allows: integer_in of its bounds (for an integer
/// list, each item's). std::logic_error for a key not declared as an integer or
/// an integer list.
CLI::Validator integer_as_declared(const std::string& key);
/// The same for any declared integer option (a grid's "slurm" block key, for the flag of its name).
CLI::Validator integer_as_declared(const OptionSpec& spec);

/// A flag's value must be a finite number in [min, max] (NaN and infinities refused).
CLI::Validator number_in(double min, double max);

/// A flag's value must be non-empty and valid UTF-8: paths (run directories
/// and results files are named in JSON), or text such as a prompt (`what`
/// names it in the message).
CLI::Validator non_empty_utf8(const std::string& what = "paths");

/// Declares a comma-separated list flag (`--schemes rope,alibi`; it may also be
/// repeated). Each item must pass `item`, and an empty item (`rope,,alibi`, a
/// leading or trailing comma) is refused: CLI11's own delimiter drops it
/// silently, so a slip such as `8,,16` would run two lengths without a word.
CLI::Option* add_list_option(CLI::App& app, const std::string& name, std::vector<std::string>& into,
                             const std::string& description, CLI::Validator item = CLI::Validator());

/// A comma-separated list flag of lengths (`--lengths 8,16,32`), which takes
/// what eval.lengths' declaration allows: each length within its bounds, at most
/// its number of lengths (across repeated flags too), none twice ("--lengths: 8
/// appears twice"), and no empty item.
CLI::Option* add_lengths_option(CLI::App& app, const std::string& name, std::vector<int64_t>& into,
                                const std::string& description);

/// Refuses (ConfigError) a --json path that `posenc <command>` may not write (util/io.h check_output_target).
void check_json_target(const std::string& path, const std::string& command);
/// Writes JSON to `path` atomically, marked as written by `posenc <command>`, or
/// to standard output when path is empty.
void emit_json(nlohmann::json j, const std::string& path, const std::string& command);

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string out;
  std::string device;
  int threads = 0;
  /// "" (start a run), "yes" (--resume: continue it) or "auto" (--resume=auto:
  /// continue the run if the directory holds a checkpoint, else start it).
  std::string resume;
  bool no_progress = false;
  int nproc = 1;
};
void setup_train(CLI::App& app, TrainOptions& o);
int run_train(const TrainOptions& o);

struct EvalOptions {
  std::string checkpoint;
  std::vector<std::string> average;
  std::vector<std::string> overrides;
  std::vector<int64_t> lengths;
  int64_t samples = 0;
  std::string out;
  std::string device = "auto";
  int threads = 1;
};
void setup_eval(CLI::App& app, EvalOptions& o);
int run_eval(const EvalOptions& o);

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 0;
  int64_t seed = 0;
  std::string out;
  std::string device = "auto";
  int threads = 1;
};
void setup_generate(CLI::App& app, GenerateOptions& o);
int run_generate(const GenerateOptions& o);

struct TranslateOptions {
  std::string checkpoint;
  std::string input;
  std::string file;
  int64_t beam = 1;
  double length_penalty = 0;
  int64_t max_tokens = 0;
  std::string device = "auto";
  int threads = 1;
};
void setup_translate(CLI::App& app, TranslateOptions& o);
int run_translate(const TranslateOptions& o);

struct ListOptions {
  bool json = false;
  bool markdown = false;
};
void setup_list(CLI::App& app, ListOptions& o);
int run_list(const ListOptions& o);

struct InspectOptions {
  std::string scheme;
  std::string checkpoint;
  bool input_slot = false;  ///< --input-scheme
  bool with_slot = false;   ///< --with-scheme
  int64_t block = 0;
  int64_t length = 64;
  int64_t heads = 4;
  int64_t dim = 32;
  std::vector<std::string> overrides;
  int64_t seed = 0;
  std::string json;
};
void setup_inspect(CLI::App& app, InspectOptions& o);
int run_inspect(const InspectOptions& o);

// compare and bench bind their flags straight to the library's options.
void setup_compare(CLI::App& app, CompareOptions& o);
int run_compare(const CompareOptions& o);

struct AttentionOptions {
  std::string checkpoint;
  int64_t length = 16;
  std::string kind;  ///< empty: not given (the ordering task's "sorted")
  int64_t index = 0;
  std::string json;
};
void setup_attention(CLI::App& app, AttentionOptions& o);
int run_attention(const AttentionOptions& o);

struct ProbeOptions {
  std::string checkpoint;
  std::vector<int64_t> lengths;
  int64_t samples = 200;
  double ridge = 1e-6;
  std::string target = "position";
  std::vector<int64_t> fit_lengths;
  std::string json;
};
void setup_probe(CLI::App& app, ProbeOptions& o);
int run_probe(const ProbeOptions& o);

struct HeadsOptions {
  std::string checkpoint;
  std::vector<int64_t> lengths;
  int64_t samples = 100;
  std::string kind;
  std::string queries = "all";
  std::vector<std::string> overrides;
  std::string json;
};
void setup_heads(CLI::App& app, HeadsOptions& o);
int run_heads(const HeadsOptions& o);

void setup_bench(CLI::App& app, BenchOptions& o);
int run_bench(const BenchOptions& o);

}  // namespace posenc::cli
