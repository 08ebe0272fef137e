// Every command and every flag of the CLI, read from its own --help, held to
// the promises every command keeps (docs/reliability.md):
// - an output flag never replaces a user's file, never writes into "/", and a
//   place where nothing can be written fails before the work;
// - an input file is a regular file: /dev/zero (never ends), a FIFO (would
//   block) and a directory are refused with one line, exit 2;
// - a flag that takes one text value refuses an empty one, naming itself.
// A command or flag that --help lists without a line in kCommands below fails
// the first test, the way a scheme without its README row fails the registry's:
// a new flag joins the contract when it is added.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/stat.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "cli_helpers.h"
#include "helpers.h"
#include "posenc/util/io.h"
#include "reliability_helpers.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::expect_one_line_error;
using posenc::testing::run_cli;
using posenc::testing::Scratch;
namespace fs = std::filesystem;

namespace {

enum class Kind {
  Other,       ///< a value or a switch: validated by the command's own tests
  InputFile,   ///< a file the command reads
  OutputFile,  ///< a file the command writes
  OutputDir,   ///< a directory the command fills
};

struct Command {
  /// The command line that runs it, with {NAME} where each file argument goes.
  std::string line;
  /// Every argument its --help lists (positionals by name), but --help.
  std::map<std::string, Kind> args;
};

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table = {
      {"train",
       {"train {config} --no-progress --out {--out}",
        {{"config", Kind::InputFile},
         {"--set", Kind::Other},
         {"--out", Kind::OutputDir},
         {"--device", Kind::Other},
         {"--threads", Kind::Other},
         {"--resume", Kind::Other},
         {"--no-progress", Kind::Other},
         {"--nproc", Kind::Other}}}},
      {"eval",
       {"eval {checkpoint} --average {--average} --lengths 8 --samples 8 --out {--out}",
        {{"checkpoint", Kind::InputFile},
         {"--average", Kind::InputFile},
         {"--lengths", Kind::Other},
         {"--set", Kind::Other},
         {"--samples", Kind::Other},
         {"--out", Kind::OutputFile},
         {"--device", Kind::Other},
         {"--threads", Kind::Other}}}},
      {"generate",
       {"generate {checkpoint} --prompt ab --tokens 4 --out {--out}",
        {{"checkpoint", Kind::InputFile},
         {"--prompt", Kind::Other},
         {"--tokens", Kind::Other},
         {"--temperature", Kind::Other},
         {"--top-k", Kind::Other},
         {"--seed", Kind::Other},
         {"--out", Kind::OutputFile},
         {"--device", Kind::Other},
         {"--threads", Kind::Other}}}},
      {"translate",
       {"translate {checkpoint} --file {--file} --max-tokens 4",
        {{"checkpoint", Kind::InputFile},
         {"--input", Kind::Other},
         {"--file", Kind::InputFile},
         {"--beam", Kind::Other},
         {"--length-penalty", Kind::Other},
         {"--max-tokens", Kind::Other},
         {"--device", Kind::Other},
         {"--threads", Kind::Other}}}},
      {"list", {"list", {{"--json", Kind::Other}, {"--markdown", Kind::Other}}}},
      {"inspect",
       {"inspect --checkpoint {--checkpoint} --length 8 --json {--json}",
        {{"scheme", Kind::Other},
         {"--checkpoint", Kind::InputFile},
         {"--input-scheme", Kind::Other},
         {"--with-scheme", Kind::Other},
         {"--block", Kind::Other},
         {"--length", Kind::Other},
         {"--heads", Kind::Other},
         {"--dim", Kind::Other},
         {"--set", Kind::Other},
         {"--seed", Kind::Other},
         {"--json", Kind::OutputFile}}}},
      {"compare",
       {"compare {config} --no-progress --no-figures --out {--out}",
        {{"config", Kind::InputFile},
         {"--jobs", Kind::Other},
         {"--threads", Kind::Other},
         {"--full", Kind::Other},
         {"--out", Kind::OutputDir},
         {"--no-figures", Kind::Other},
         {"--no-progress", Kind::Other},
         {"--inspect-length", Kind::Other},
         {"--attention-length", Kind::Other},
         {"--slurm", Kind::Other},
         {"--status", Kind::Other},
         {"--collect", Kind::Other},
         {"--run", Kind::Other},
         {"--partition", Kind::Other},
         {"--time", Kind::Other},
         {"--account", Kind::Other},
         {"--gpus-per-task", Kind::Other},
         {"--ntasks-per-run", Kind::Other},
         {"--sbatch", Kind::Other}}}},
      {"attention",
       {"attention {checkpoint} --length 8 --json {--json}",
        {{"checkpoint", Kind::InputFile},
         {"--length", Kind::Other},
         {"--kind", Kind::Other},
         {"--index", Kind::Other},
         {"--json", Kind::OutputFile}}}},
      {"probe",
       {"probe {checkpoint} --lengths 8 --samples 8 --json {--json}",
        {{"checkpoint", Kind::InputFile},
         {"--lengths", Kind::Other},
         {"--samples", Kind::Other},
         {"--ridge", Kind::Other},
         {"--target", Kind::Other},
         {"--fit-lengths", Kind::Other},
         {"--json", Kind::OutputFile}}}},
      {"heads",
       {"heads {checkpoint} --lengths 8 --samples 8 --json {--json}",
        {{"checkpoint", Kind::InputFile},
         {"--lengths", Kind::Other},
         {"--samples", Kind::Other},
         {"--kind", Kind::Other},
         {"--queries", Kind::Other},
         {"--set", Kind::Other},
         {"--json", Kind::OutputFile}}}},
      {"bench",
       {"bench {config} --no-python --out {--out}",
        {{"config", Kind::InputFile},
         {"--sizes", Kind::Other},
         {"--schemes", Kind::Other},
         {"--threads", Kind::Other},
         {"--device", Kind::Other},
         {"--bf16", Kind::Other},
         {"--attention", Kind::Other},
         {"--no-python", Kind::Other},
         {"--out", Kind::OutputDir}}}},
  };
  return table;
}

/// How each command meets a stop signal: the line of a run long enough to be
/// stopped (placeholders as in commands(), filled the same way), or, for a
/// command with no long loop, why it has none. Every command has an entry, so a
/// new one states how it stops.
struct LongRun {
  std::string line;
  std::string why_none;
};

const std::map<std::string, LongRun>& long_runs() {
  static const std::map<std::string, LongRun> table = {
      {"train", {"train {config} --no-progress --set train.steps=10000000 --out {--out}", ""}},
      // Lengths 256 alone take minutes on a CPU core but 1 s on an H200: the longer
      // ones keep a GPU busy well past the signal at 5 s.
      {"eval", {"eval {checkpoint} --lengths 256,512,1024 --samples 100000 --out {--out}", ""}},
      {"generate", {"generate {checkpoint} --prompt ab --tokens 1000000 --out {--out}", ""}},
      {"translate", {"translate {checkpoint} --input walk --beam 8 --max-tokens 65536", ""}},
      {"compare", {"compare {config} --jobs 1 --no-progress --no-figures --out {--out}", ""}},
      {"bench", {"bench {config} --no-python --out {--out}", ""}},
      {"list", {"", "prints the config keys and the registries"}},
      {"inspect", {"", "one scheme's tensors, capped at 4,194,304 numbers"}},
      {"attention", {"", "one forward pass, capped at 4,194,304 numbers"}},
      {"probe", {"probe {checkpoint} --lengths 1024 --samples 4000 --json {--json}", ""}},
      {"heads", {"heads {checkpoint} --lengths 1024 --samples 4000 --json {--json}", ""}},
  };
  return table;
}

/// `text` in lower case (ASCII).
std::string lower(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

/// The indented first words of a --help section ("Subcommands:", "Options:",
/// "Positionals:"; CLI11 2.4 writes them in capitals).
std::vector<std::string> section_words(const std::string& help, const std::string& section) {
  std::vector<std::string> words;
  std::istringstream in(help);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != ' ') {
      inside = lower(line).rfind(lower(section), 0) == 0;
      continue;
    }
    if (!inside || line.size() < 3 || line[2] == ' ') continue;  // a wrapped description
    // "checkpoint TEXT:FILE", "--out TEXT", "-j,--jobs INT", "-h,     --help": the long name, else the first.
    std::istringstream tokens(line);
    std::string token, name;
    for (bool more = true; more && tokens >> token;) {
      more = token.back() == ',';
      std::istringstream parts(token);
      for (std::string part; std::getline(parts, part, ',');)
        if (!part.empty() && (name.empty() || part.rfind("--", 0) == 0)) name = part;
    }
    if (!name.empty()) words.push_back(name);
  }
  return words;
}

/// Tiny runs whose files the commands read: an ordering run, a charlm run and an encoder_decoder; trained
/// once for the suite (three posenc processes), read and never written by its tests.
struct TrainedRuns {
  Scratch s{"cli_contract_runs"};
  std::map<std::string, std::string> files;  ///< "{command}/{arg}" or "{arg}" -> a file that works

  TrainedRuns() {
    const std::string src = POSENC_SOURCE_DIR;
    const std::string config = posenc::testing::write_config(s, "c.json", {"train.steps=2", "eval.lengths=[8]"});
    EXPECT_EQ(run_cli("train " + config + " --no-progress --out " + s.path("run")).code, 0);
    std::string corpus;
    for (int i = 0; i < 80; ++i) corpus += "abcdefgh ";
    write_file_atomic(s.path("corpus.txt"), corpus);
    EXPECT_EQ(run_cli("train " + src + "/configs/charlm.json --no-progress --set task.path=" + s.path("corpus.txt") +
                      " --set task.min_length=16 --set task.max_length=16 --set model.d_model=16 --set model.heads=2"
                      " --set model.layers=1 --set model.d_ff=32 --set train.steps=2 --set train.val_samples=4"
                      " --set eval.lengths=[16] --out " +
                      s.path("lm"))
                  .code,
              0);
    EXPECT_EQ(run_cli("train " + src +
                      "/configs/scan.json --set model.d_model=16 --set model.heads=2 --set model.layers=1"
                      " --set model.decoder_layers=1 --set model.d_ff=32 --set train.steps=2 --set train.batch_size=8"
                      " --set train.val_samples=8 --set eval.lengths=[24] --set eval.samples_per_length=4"
                      " --no-progress --out " +
                      s.path("encoder_decoder"))
                  .code,
              0);
    write_file_atomic(s.path("sources.txt"), "walk\n");
    nlohmann::json grid = posenc::testing::tiny_grid();
    write_file_atomic(s.path("grid.json"), grid.dump());
    files = {{"train/config", config},
             {"compare/config", s.path("grid.json")},
             {"bench/config", src + "/configs/bench.json"},
             {"generate/checkpoint", s.path("lm/checkpoint.pt")},
             {"translate/checkpoint", s.path("encoder_decoder/checkpoint.pt")},
             {"checkpoint", s.path("run/checkpoint.pt")},
             {"--checkpoint", s.path("run/checkpoint.pt")},
             {"--average", s.path("run/checkpoint.pt")},
             {"--file", s.path("sources.txt")}};
  }
};

const TrainedRuns& trained_runs() {
  static const TrainedRuns runs;
  return runs;
}

/// `posenc --help` (command "") or `posenc COMMAND --help`, run once per command for the suite.
const std::string& help_of(const std::string& command) {
  static std::map<std::string, std::string> helps;
  auto it = helps.find(command);
  if (it == helps.end())
    it = helps.emplace(command, run_cli(command.empty() ? "--help" : command + " --help").output).first;
  return it->second;
}

/// The suite's trained runs, and a scratch directory of the test's own for what the commands write.
struct Fixtures {
  Scratch s{"cli_contract"};
  std::map<std::string, std::string> defaults = trained_runs().files;  ///< "{command}/{arg}" or "{arg}" -> a value

  /// `command`'s line with `arg` set to `value` and every other file argument to one that works.
  std::string line(const std::string& command, const std::string& arg, const std::string& value) {
    return fill(command, commands().at(command).line, arg, value);
  }

  /// `text` (a line of `command`) with its placeholders filled as line() does.
  std::string fill(const std::string& command, const std::string& text, const std::string& arg = "",
                   const std::string& value = "") {
    const Command& c = commands().at(command);
    std::string out = text;
    for (const auto& [name, kind] : c.args) {
      const std::string placeholder = "{" + name + "}";
      const auto at = out.find(placeholder);
      if (at == std::string::npos) continue;
      std::string v = value;
      if (name != arg) {
        const auto own = defaults.find(command + "/" + name);
        v = own != defaults.end()  ? own->second
            : defaults.count(name) ? defaults.at(name)
                                   : s.path("fresh-" + command + "-" + name.substr(name.find_first_not_of('-')));
      }
      out.replace(at, placeholder.size(), v);
    }
    return out;
  }
};

}  // namespace

TEST(CliContract, EveryCommandAndFlagOfTheHelpIsInTheContract) {
  std::set<std::string> listed;
  for (const auto& command : section_words(help_of(""), "Subcommands:")) {
    listed.insert(command);
    ASSERT_TRUE(commands().count(command)) << "posenc " << command << " is not in tests/test_cli_contract.cpp";
    const std::string& help = help_of(command);
    std::set<std::string> args;
    for (const auto& section : {"Positionals:", "Options:"})
      for (const auto& word : section_words(help, section))
        if (word != "--help") args.insert(word);
    std::set<std::string> known;
    for (const auto& [name, kind] : commands().at(command).args) known.insert(name);
    EXPECT_EQ(args, known) << "posenc " << command
                           << ": --help and tests/test_cli_contract.cpp list different arguments; give each new one "
                              "its kind there (and its guarantees in the command)";
  }
  for (const auto& [name, c] : commands()) EXPECT_TRUE(listed.count(name)) << name << " is no longer a command";
}

// A list flag is declared through one reader (add_list_option in src/cli/validators.cpp), whose help names
// its type "INT,..." or "FILE,...". CLI11's own delimiter would drop an empty item silently, so no command may
// declare one; and every list flag the help shows refuses an empty item, naming the flag.
TEST(CliContract, EveryListFlagRefusesAnEmptyItem) {
  const fs::path cli = fs::path(POSENC_SOURCE_DIR) / "src" / "cli";
  for (const auto& e : fs::directory_iterator(cli)) {
    if (e.path().extension() != ".cpp" || e.path().filename() == "validators.cpp") continue;
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("->delimiter("), std::string::npos)
        << e.path() << " splits a flag with CLI11's delimiter: declare it with add_list_option";
  }
  const std::string existing = std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json";
  const std::regex list_flag(R"re(^\s+(?:-\w,)?(--[a-z-]+) \S+,\.\.\.)re");
  int lists = 0;
  for (const auto& command : section_words(help_of(""), "Subcommands:")) {
    std::istringstream help(help_of(command));
    for (std::string line; std::getline(help, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, list_flag)) continue;
      ++lists;
      const std::string flag = m[1].str();
      const auto r = run_cli(command + " " + existing + " " + flag + " ,8");
      EXPECT_EQ(r.code, 2) << command << " " << flag << ":\n" << r.output;
      EXPECT_NE(r.output.find("error: " + flag + ": ',8' has an empty item (item 1 of 2)"), std::string::npos)
          << command << " " << flag << ":\n"
          << r.output;
    }
  }
  EXPECT_GE(lists, 7) << "eval, probe, heads and bench declare seven list flags; --help shows fewer";
}

// A flag that takes one text value never reads an empty one as "not given": every one the help shows, given '' in
// a line that otherwise runs, is refused with one line naming it, exit 2.
TEST(CliContract, EveryTextFlagRefusesAnEmptyValue) {
  Fixtures f;
  const std::regex text_flag(R"re(^\s+(?:-\w,)?(--[a-z-]+) TEXT(?::\S+)?(?:=\S*)?(?:\s|$))re");
  int flags = 0;
  for (const auto& [command, c] : commands()) {
    std::istringstream help(help_of(command));
    for (std::string line; std::getline(help, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, text_flag)) continue;
      const std::string flag = m[1].str();
      if (line.substr(m.position(0) + m.length(0)).rfind("...", 0) == 0) continue;  // repeatable: parsed per item
      ++flags;
      // The flag's own placeholder, where the line has one, takes the empty value.
      std::string run = f.line(command, flag, "''");
      if (run.find(flag + " ''") == std::string::npos) run += " " + flag + " ''";
      const auto r = run_cli(run);
      EXPECT_EQ(r.code, 2) << run << ":\n" << r.output;
      expect_one_line_error(r.output, flag);
    }
  }
  EXPECT_GE(flags, 20) << "the commands' --help shows fewer single text flags than expected";
}

TEST(CliContract, EveryInputFileRefusesADeviceAFifoAndADirectory) {
  Fixtures f;
  ASSERT_EQ(::mkfifo(f.s.path("fifo").c_str(), 0600), 0);
  fs::create_directories(f.s.path("a-directory"));
  for (const auto& [command, c] : commands())
    for (const auto& [arg, kind] : c.args) {
      if (kind != Kind::InputFile) continue;
      for (const std::string& bad : {std::string("/dev/zero"), f.s.path("fifo"), f.s.path("a-directory")}) {
        const std::string line = f.line(command, arg, bad);
        const auto r = run_cli(line, "timeout 120");
        EXPECT_EQ(r.code, 2) << line << ":\n" << r.output.substr(0, 2000);
        EXPECT_NE(r.output.find("rror"), std::string::npos) << line << ":\n" << r.output.substr(0, 2000);
      }
    }
}

TEST(CliContract, EveryOutputKeepsAUsersFilesAndRefusesTheRootAndAReadOnlyPlace) {
  Fixtures f;
  // A user's own files, named as outputs of the commands are.
  const std::vector<std::string> names = {"summary.md", "report.md",   "summary.csv",  "bench.md",
                                          "bench.json", "config.json", "results.json", "metrics.jsonl"};
  for (const auto& name : names) write_file_atomic(f.s.path("users/" + name), "mine\n");
  write_file_atomic(f.s.path("users-file.json"), "mine\n");
  const fs::path ro = f.s.dir / "ro";
  fs::create_directories(ro);
  const bool read_only = ::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=64k") == 0;
  for (const auto& [command, c] : commands())
    for (const auto& [arg, kind] : c.args) {
      if (kind != Kind::OutputFile && kind != Kind::OutputDir) continue;
      // '' (an unset variable, `--json "$OUT"`) is refused, not taken for "no output flag".
      std::vector<std::string> targets = {"/", "''",
                                          kind == Kind::OutputDir ? f.s.path("users") : f.s.path("users-file.json")};
      if (kind == Kind::OutputDir) targets.push_back(f.s.path("users-file.json"));  // a file given as a directory
      if (read_only) targets.push_back((ro / (command + "-out")).string());
      for (const auto& target : targets) {
        const std::string line = f.line(command, arg, target);
        const auto r = run_cli(line, "timeout 300");
        EXPECT_EQ(r.code, 2) << line << ":\n" << r.output.substr(0, 2000);
        expect_one_line_error(r.output, arg);
      }
    }
  if (read_only) ::umount(ro.c_str());
  for (const auto& name : names) EXPECT_EQ(read_file(f.s.path("users/" + name)), "mine\n") << name;
  EXPECT_EQ(read_file(f.s.path("users-file.json")), "mine\n");
  EXPECT_TRUE(fs::is_empty(f.s.dir / "ro")) << "something was written under the read-only place";
}

// Every long loop polls the one stop flag: SIGTERM (Slurm, `timeout`) during a
// long run of each command ends it with its own "stopped by SIGTERM" line and
// exit 143, within seconds, never by the default action or a hang.
TEST(CliContract, EveryLongRunStopsOnSigtermWithItsOwnLine) {
  for (const auto& [command, c] : commands())
    ASSERT_TRUE(long_runs().count(command)) << "posenc " << command << " has no entry in long_runs()";
  Fixtures f;
  nlohmann::json grid = posenc::testing::tiny_grid();
  grid["set"]["train.steps"] = 10000000;
  write_file_atomic(f.s.path("long-grid.json"), grid.dump());
  f.defaults["compare/config"] = f.s.path("long-grid.json");
  for (const auto& [command, run] : long_runs()) {
    if (run.line.empty()) {
      EXPECT_FALSE(run.why_none.empty()) << command;
      continue;
    }
    const std::string line = f.fill(command, run.line);
    // SIGTERM after 5 s to the command's process group (as Slurm and a terminal
    // signal a whole job), SIGKILL 60 s later if it does not end: exit 137.
    const auto r = run_cli(line, "timeout --preserve-status -k 60 -s TERM 5");
    EXPECT_EQ(r.code, 128 + 15) << line << ":\n" << r.output.substr(0, 3000);
    EXPECT_NE(r.output.find("stopped by SIGTERM"), std::string::npos)
        << line << ": the command's own line, not the default action:\n"
        << r.output.substr(0, 3000);
  }
}

// In a build with sanitizers (scripts/test-sanitizers.sh) a command that met
// one may still exit with the code its test expects: run_cli fails the test on
// the report in its output.
TEST(CliContract, ASanitizersReportInACommandsOutputFailsItsTest) {
  EXPECT_NONFATAL_FAILURE(posenc::testing::expect_no_sanitizer_report(
                              "src/a.cpp:3:5: runtime error: signed integer overflow", "posenc train"),
                          "posenc train met a sanitizer");
  EXPECT_NONFATAL_FAILURE(posenc::testing::expect_no_sanitizer_report(
                              "==7==ERROR: AddressSanitizer: heap-use-after-free on address", "posenc eval"),
                          "posenc eval met a sanitizer");
  EXPECT_NONFATAL_FAILURE(
      posenc::testing::expect_no_sanitizer_report("==7==ERROR: LeakSanitizer: detected memory leaks", "posenc list"),
      "posenc list met a sanitizer");
  posenc::testing::expect_no_sanitizer_report("error: c.json: model.heads: 3 does not divide model.d_model 64",
                                              "an error of posenc's own");
}

}  // namespace POSENC_TEST_UNIT
