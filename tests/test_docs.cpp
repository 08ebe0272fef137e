// The docs against the code, so that they cannot drift apart:
//  - the resume keys the README and ARCHITECTURE name are run_dir's list;
//  - every config key is declared once, and docs/configs.md is what `posenc list --markdown` writes;
//  - the "slurm" block docs/cluster.md shows is one the reader takes, with every declared key;
//  - every script in scripts/ and every golden fixture is named in the README;
//  - every posenc command the docs show names a subcommand, flags and configs
//    that exist, and a training command's config loads with its overrides;
//  - the docs and sources say what posenc is, not how a figure came about:
//    no nickname for a source, no "this machine", no word about who measured
//    what, and nothing refers to files outside the repository.
// A failure names the file, the line or the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "helpers.h"
#include "posenc/config.h"
#include "posenc/experiments/compare_plan.h"
#include "posenc/experiments/slurm.h"
#include "posenc/positional/registry.h"
#include "posenc/tasks/registry.h"
#include "posenc/train/run_dir.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
namespace fs = std::filesystem;

namespace {

const fs::path kRoot = POSENC_SOURCE_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << "cannot read " << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The text with every run of whitespace (line breaks included) made one space.
std::string flattened(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

/// Every dotted key path under `j` ("model.positional.type"); objects are walked into.
void collect_keys(const json& j, const std::string& prefix, std::set<std::string>& out) {
  for (const auto& [key, value] : j.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object() && !value.empty())
      collect_keys(value, path, out);
    else
      out.insert(path);
  }
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

/// The options some scheme or some task declares.
std::set<std::string> declared_scheme_options() {
  std::set<std::string> out;
  for (const auto& name : scheme_names())
    for (const auto& o : find_scheme(name).options) out.insert(o.name);
  return out;
}

/// The config.h keys: a resolved config's keys, for an encoder with randomized
/// positions and averaged weights, an encoder_decoder, a pair of schemes and an operand grid (the keys written only for them),
/// without the options that schemes and tasks declare (`posenc list` shows those).
std::set<std::string> core_config_keys() {
  std::set<std::string> all;
  const auto scratch = fs::temp_directory_path() / "posenc_docs_keys";
  collect_keys(config_to_json(posenc::testing::small_config(
                   scratch, {"model.positional.randomize.max_position=64", "train.average_from=100",
                             "train.deterministic=true", "model.attention.head_scale=true",
                             "train.init_from=\"unused.pt\"", "train.trainable=\"head_scale\""})),
               "", all);
  collect_keys(config_to_json(posenc::testing::small_config(
                   scratch, {"task.type=\"copy\"", "model.kind=\"encoder_decoder\"", "model.decoder_layers=2"})),
               "", all);
  collect_keys(
      config_to_json(posenc::testing::small_config(
          scratch, {"model.positional.type=\"alibi\"", "model.positional.input=\"learned\"",
                    "model.positional.with=\"fox\"", "model.positional.nope_every=2", "model.attention.window=8",
                    "model.attention.qk_norm=true", "model.attention.qk_norm_over=\"width\"",
                    "model.attention.logn_from=8", "model.attention.length_scaling_in=\"nope_blocks\"",
                    "model.attention.temperature_from=16", "model.attention.temperature_beta=0.2"})),
      "", all);
  collect_keys(config_to_json(posenc::testing::config_with({"task.type=\"addition\"", "model.kind=\"decoder\"",
                                                            "eval.operand_grid=[2,4]", "eval.wrong_answers=3"})),
               "", all);
  collect_keys(config_to_json(posenc::testing::config_with(
                   {"task.type=\"addition\"", "model.kind=\"decoder\"", "task.positions=\"coupled\"",
                    "model.positional.type=\"kerple\"", "model.positional.input=\"learned\"",
                    "model.positional.task_ids=\"both\""})),
               "", all);
  const auto scheme_options = declared_scheme_options();
  // `block` (a config block's path) declares the key `name` itself.
  const auto declares = [](const std::string& block, const std::string& name) {
    const auto& keys = config_block(block).keys;
    return std::any_of(keys.begin(), keys.end(), [&](const OptionSpec& key) { return key.name == name; });
  };
  std::set<std::string> core;
  for (const auto& key : all) {
    // Every task.* key the task block does not declare is the task's own (tasks/registry.h).
    if (starts_with(key, "task.") && !declares("task", key.substr(std::string("task.").size()))) continue;
    // A scheme slot (cross, input, with) is written as {type, its options}: the slot is the key.
    const std::string slot = key.substr(0, key.find('.', std::string("model.positional.").size()));
    if (slot != key && starts_with(slot, "model.positional.")) {
      const auto& keys = config_block("model.positional").keys;
      const std::string name = slot.substr(std::string("model.positional.").size());
      if (std::any_of(keys.begin(), keys.end(),
                      [&](const OptionSpec& k) { return k.name == name && k.kind == OptionKind::Scheme; })) {
        core.insert(slot);
        continue;
      }
    }
    if (starts_with(key, "model.positional.")) {
      const std::string rest = key.substr(std::string("model.positional.").size());
      if (rest.find('.') == std::string::npos && scheme_options.count(rest) && !declares("model.positional", rest))
        continue;  // a scheme's own option
    }
    core.insert(key);
  }
  return core;
}

/// README.md and every Markdown page under docs/.
std::vector<fs::path> doc_pages() {
  std::vector<fs::path> out = {kRoot / "README.md"};
  for (const auto& e : fs::recursive_directory_iterator(kRoot / "docs"))
    if (e.is_regular_file() && e.path().extension() == ".md") out.push_back(e.path());
  return out;
}

/// Every text file of the tree that users read: docs, sources, tests, scripts, configs.
std::vector<fs::path> tree_files() {
  std::vector<fs::path> out = {kRoot / "README.md", kRoot / "CMakeLists.txt"};
  for (const char* top : {"include", "src", "tests", "scripts", "configs", "docs", ".ci", "cmake"}) {
    if (!fs::exists(kRoot / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(kRoot / top)) {
      const auto ext = e.path().extension();
      // This file holds the phrases it looks for.
      if (e.is_regular_file() && ext != ".png" && ext != ".tsv" && e.path().parent_path().filename() != "golden" &&
          e.path().filename() != "test_docs.cpp")
        out.push_back(e.path());
    }
  }
  return out;
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

/// Each line of `files` that holds one of `phrases` (case-insensitive), as "file:line: phrase".
std::vector<std::string> lines_holding(const std::vector<fs::path>& files, const std::vector<std::string>& phrases) {
  std::vector<std::string> out;
  for (const auto& f : files) {
    std::istringstream in(read_text(f));
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      const std::string low = lowercase(line);
      for (const auto& p : phrases)
        if (low.find(p) != std::string::npos)
          out.push_back(fs::relative(f, kRoot).string() + ":" + std::to_string(number) + ": \"" + p + "\"");
    }
  }
  return out;
}

/// A `posenc SUBCOMMAND ...` command as a page shows it, split into words
/// (quotes removed; a `#` comment, a pipe or a redirection ends it).
struct ShownCommand {
  std::string where;  // "README.md:12"
  std::string subcommand;
  std::vector<std::string> words;  // after the subcommand
  std::string shown_error;         // the page shows it failing with "error: <this>"
};

/// Whether a Markdown line opens or closes a fenced code block (``` after any indent).
bool fence_line(const std::string& line) {
  const size_t indent = line.find_first_not_of(' ');
  return indent != std::string::npos && starts_with(line.substr(indent), "```");
}

/// A piece of code on a page: an inline span, or a fenced block's line with its
/// backslash continuations; where a fenced line is a `$ ` prompt, what the
/// lines after it show it printing.
struct CodePiece {
  int line = 0;
  std::string code, output;
};

std::vector<CodePiece> code_pieces(const std::string& text) {
  std::vector<CodePiece> out;
  std::istringstream in(text);
  bool fenced = false, prompted = false;  // prompted: the last command began with "$ "
  std::string continued;
  int number = 0, continued_from = 0;
  static const std::regex inline_span("`([^`]+)`");
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (fence_line(line)) {
      fenced = !fenced;
      prompted = false;
      continue;
    }
    if (!fenced) {
      for (std::sregex_iterator it(line.begin(), line.end(), inline_span), end; it != end; ++it)
        out.push_back({number, (*it)[1].str(), ""});
      continue;
    }
    if (prompted && !starts_with(line, "$ ")) {  // a line the prompted command prints
      out.back().output += line + "\n";
      continue;
    }
    if (continued.empty()) {
      continued_from = number;
      prompted = starts_with(line, "$ ");
      if (prompted) line = line.substr(2);
    }
    if (!line.empty() && line.back() == '\\') {
      continued += line.substr(0, line.size() - 1) + " ";
      continue;
    }
    out.push_back({continued_from, continued + line, ""});
    continued.clear();
  }
  return out;
}

/// The words of a shell command up to a comment, pipe, redirection or `&&`,
/// with single and double quotes (and their backslash escapes) removed.
std::vector<std::string> shell_words(const std::string& code) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < code.size(); ++i) {
    const char c = code[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else if (c == '\\' && quote == '"' && i + 1 < code.size()) {
        word += code[++i];
      } else {
        word += c;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < code.size()) {
      word += code[++i];
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else if (!in_word && (c == '#' || c == '|' || c == '>' || c == ';' || c == '&')) {
      break;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(word);
  return out;
}

/// Every `posenc SUBCOMMAND ...` (or build/posenc ...) in the code of the README and docs/.
std::vector<ShownCommand> shown_commands() {
  std::vector<ShownCommand> out;
  for (const auto& page : doc_pages()) {
    for (const auto& piece : code_pieces(read_text(page))) {
      const auto words = shell_words(piece.code);
      for (size_t i = 0; i + 1 < words.size(); ++i) {
        const std::string& w = words[i];
        if (w != "posenc" && !(w.size() > 7 && w.substr(w.size() - 7) == "/posenc")) continue;
        if (!std::islower(static_cast<unsigned char>(words[i + 1][0]))) continue;
        ShownCommand c{fs::relative(page, kRoot).string() + ":" + std::to_string(piece.line), words[i + 1], {}, ""};
        c.words.assign(words.begin() + static_cast<long>(i) + 2, words.end());
        if (starts_with(piece.output, "error: ")) c.shown_error = piece.output.substr(7, piece.output.find('\n') - 7);
        out.push_back(std::move(c));
        break;
      }
    }
  }
  return out;
}

/// Every `scripts/NAME.py --flag ...` in the code of the README and docs/, as
/// (where, script, flag).
std::vector<std::array<std::string, 3>> shown_script_flags() {
  std::vector<std::array<std::string, 3>> out;
  for (const auto& page : doc_pages())
    for (const auto& piece : code_pieces(read_text(page))) {
      std::string script;
      for (const auto& w : shell_words(piece.code)) {
        if (starts_with(w, "scripts/") && w.size() > 3 && w.substr(w.size() - 3) == ".py")
          script = w;
        else if (!script.empty() && starts_with(w, "--"))
          out.push_back({fs::relative(page, kRoot).string() + ":" + std::to_string(piece.line), script,
                         w.substr(0, w.find('='))});
      }
    }
  return out;
}

/// The long flags a subcommand's --help names.
std::set<std::string> help_flags(const std::string& subcommand) {
  const auto r = posenc::testing::run_cli(subcommand + " --help");
  EXPECT_EQ(r.code, 0) << subcommand << " --help: " << r.output;
  std::set<std::string> flags;
  static const std::regex flag("--[a-z0-9][a-z0-9-]*");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), flag), end; it != end; ++it) flags.insert(it->str());
  return flags;
}

/// A word that stands for what a reader fills in: GRID, CKPT, N, [...], ...
bool placeholder(const std::string& word) {
  return word.find("...") != std::string::npos ||
         std::any_of(word.begin(), word.end(), [](unsigned char c) { return std::isupper(c); }) ||
         word.find('<') != std::string::npos;
}

/// The next code point of UTF-8 `s` from `i` (advanced past it); U+FFFD for a broken sequence.
char32_t next_code_point(const std::string& s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  const int extra = lead < 0x80 ? 0 : (lead >> 5) == 0x6 ? 1 : (lead >> 4) == 0xE ? 2 : (lead >> 3) == 0x1E ? 3 : -1;
  if (extra < 0 || i + static_cast<size_t>(extra) >= s.size()) {
    ++i;
    return 0xFFFD;
  }
  char32_t cp = extra == 0 ? lead : lead & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (byte(i + static_cast<size_t>(k)) & 0x3F);
  i += static_cast<size_t>(extra) + 1;
  return cp;
}

/// The anchor GitHub gives a heading: lowercase; letters, digits, '-' and '_'
/// kept, spaces made '-', everything else dropped (punctuation, and symbols
/// such as '×' or '–'). Letters beyond ASCII are recognised in the Latin,
/// Greek and Cyrillic blocks, which is all the docs use.
std::string heading_anchor(const std::string& heading) {
  std::string out;
  for (size_t i = 0; i < heading.size();) {
    const size_t start = i;
    const char32_t cp = next_code_point(heading, i);
    if (cp < 0x80) {
      const char c = static_cast<char>(std::tolower(static_cast<int>(cp)));
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') out += c;
      if (c == ' ') out += '-';
    } else if ((cp >= 0xC0 && cp <= 0x24F && cp != 0xD7 && cp != 0xF7) || (cp >= 0x370 && cp <= 0x52F)) {
      out += heading.substr(start, i - start);  // kept as written (the docs' headings start their words in ASCII)
    }
  }
  return out;
}

/// The anchors of a Markdown page's headings (outside fenced code), links in
/// a heading counted by their text, a repeated anchor numbered -1, -2, ...
std::set<std::string> heading_anchors(const fs::path& page) {
  std::set<std::string> out;
  std::map<std::string, int> seen;
  std::istringstream in(read_text(page));
  bool fenced = false;
  static const std::regex heading("^#{1,6}[ \\t]+(.*?)[ \\t]*$"), link("\\[([^\\]]*)\\]\\([^)]*\\)");
  for (std::string line; std::getline(in, line);) {
    if (fence_line(line)) fenced = !fenced;
    std::smatch m;
    if (fenced || !std::regex_match(line, m, heading)) continue;
    const std::string anchor = heading_anchor(std::regex_replace(m[1].str(), link, "$1"));
    const int n = seen[anchor]++;
    out.insert(n == 0 ? anchor : anchor + "-" + std::to_string(n));
  }
  return out;
}

}  // namespace

// Every command the README and docs/ show is one posenc takes: the
// subcommand exists, every flag is one its --help names, every configs/ file
// exists, and a `posenc train configs/X.json --set ...` loads (the keys exist,
// the values are valid for the schemes and tasks it names).
TEST(Docs, EveryCommandTheDocsShowIsOnePosencTakes) {
  std::map<std::string, std::set<std::string>> flags_of;
  for (const char* sub :
       {"train", "eval", "generate", "translate", "list", "inspect", "compare", "attention", "probe", "heads", "bench"})
    flags_of[sub] = help_flags(sub);
  const auto commands = shown_commands();
  ASSERT_GT(commands.size(), 50u) << "the docs show fewer posenc commands than they do";
  int loaded = 0;  // training commands whose config was loaded with their overrides
  for (const auto& c : commands) {
    const auto flags = flags_of.find(c.subcommand);
    if (flags == flags_of.end()) {
      ADD_FAILURE() << c.where << ": `posenc " << c.subcommand << "` is not a posenc subcommand";
      continue;
    }
    std::string config;
    std::vector<std::string> sets;
    bool filled_in = true;  // no placeholder among the words
    for (size_t i = 0; i < c.words.size(); ++i) {
      std::string w = c.words[i];
      while (!w.empty() && (w.front() == '[' || w.front() == '(')) w.erase(0, 1);
      while (!w.empty() && (w.back() == ']' || w.back() == ')' || w.back() == ',' || w.back() == '.')) w.pop_back();
      if (placeholder(w)) filled_in = false;
      if (starts_with(w, "--")) {
        const std::string name = w.substr(0, w.find('='));
        EXPECT_TRUE(flags->second.count(name)) << c.where << ": `posenc " << c.subcommand << "` has no flag " << name;
        if (name == "--set" && i + 1 < c.words.size()) {
          sets.push_back(c.words[++i]);
          if (placeholder(sets.back())) filled_in = false;
        }
      } else if (starts_with(w, "configs/") && !placeholder(w)) {
        EXPECT_TRUE(fs::exists(kRoot / w)) << c.where << ": " << w << " does not exist";
        if (config.empty() && fs::exists(kRoot / w)) config = w;
      }
    }
    if (c.subcommand != "train" || config.empty() || !filled_in) continue;
    std::string error;
    ++loaded;
    try {
      load_config((kRoot / config).string(), sets);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (c.shown_error.empty())
      EXPECT_EQ(error, "") << c.where << ": `posenc train " << config << "` with its --set does not load";
    else  // posenc names the config by the path it was given
      EXPECT_TRUE(error.size() >= c.shown_error.size() &&
                  error.compare(error.size() - c.shown_error.size(), c.shown_error.size(), c.shown_error) == 0)
          << c.where << ": the page shows `posenc train " << config << "` failing with\n  error: " << c.shown_error
          << "\nbut it fails with\n  " << (error.empty() ? "(nothing: it loads)" : error);
  }
  EXPECT_GT(loaded, 20) << "fewer training commands were loaded than the docs show";
}

// The same for the Python scripts: a flag the docs give one is one its argparse declares.
TEST(Docs, EveryScriptFlagTheDocsShowIsOneTheScriptDeclares) {
  const auto shown = shown_script_flags();
  EXPECT_GE(shown.size(), 3u) << "the docs show fewer script flags than they do";
  for (const auto& [where, script, flag] : shown) {
    ASSERT_TRUE(fs::exists(kRoot / script)) << where << ": " << script << " does not exist";
    EXPECT_NE(read_text(kRoot / script).find("\"" + flag + "\""), std::string::npos)
        << where << ": " << script << " declares no " << flag;
  }
}

TEST(Docs, TheResumeKeysNamedAreTheOnesARunDirectoryAllows) {
  const std::string keys = resumable_changes_text();  // "train.steps, ... and eval.*"
  for (const char* page : {"README.md", "docs/ARCHITECTURE.md"})
    EXPECT_NE(flattened(read_text(kRoot / page)).find(keys), std::string::npos)
        << page << " does not name the keys a resume may change as train/run_dir.cpp does: " << keys;
}

TEST(Docs, EveryKeyAConfigWritesIsDeclaredOnceAndEveryDeclaredKeyIsWritten) {
  const auto core = core_config_keys();
  ASSERT_GT(core.size(), 30u);
  std::set<std::string> declared;
  for (const auto& block : posenc::config_blocks())
    for (const auto& key : block.keys)
      EXPECT_TRUE(declared.insert(block.path + "." + key.name).second) << block.path << "." << key.name << " twice";
  for (const auto& key : core) EXPECT_TRUE(declared.count(key)) << key << " is written by config_to_json, not declared";
  for (const auto& key : declared) EXPECT_TRUE(core.count(key)) << key << " is declared, but no config writes it";
}

TEST(Docs, TheConfigsPageIsWhatListWrites) {
  const auto r = posenc::testing::run_cli("list --markdown");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(r.output == read_text(kRoot / "docs" / "configs.md"))
      << "docs/configs.md differs from `posenc list --markdown`; write it again with\n"
         "  build/posenc list --markdown > docs/configs.md";
}

// docs/cluster.md shows a grid's "slurm" block: it must be one the reader
// takes, and show every key the block declares.
TEST(Docs, TheClusterPagesSlurmBlockIsValidAndShowsEveryDeclaredKey) {
  const std::string page = read_text(kRoot / "docs" / "cluster.md");
  const std::string opening = "```json\n\"slurm\": {";
  const size_t at = page.find(opening);
  ASSERT_NE(at, std::string::npos) << "docs/cluster.md shows no \"slurm\" block in a json code block";
  const size_t start = at + opening.size() - 1, end = page.find("\n```", start);
  ASSERT_NE(end, std::string::npos);
  const nlohmann::json block = nlohmann::json::parse(page.substr(start, end - start));
  EXPECT_NO_THROW(read_slurm_settings(block, "docs/cluster.md slurm"));
  for (const OptionSpec& key : slurm_block_keys())
    EXPECT_TRUE(block.contains(key.name)) << "docs/cluster.md's \"slurm\" block does not show " << key.name;
}

// docs/commands.md shows a comparison grid: it must plan as it is, with and without --full.
TEST(Docs, TheCommandsPagesGridPlans) {
  const std::string page = read_text(kRoot / "docs" / "commands.md");
  const std::string opening = "```json\n{\n  \"base\"";
  const size_t at = page.find(opening);
  ASSERT_NE(at, std::string::npos) << "docs/commands.md shows no grid in a json code block";
  const size_t start = at + std::string("```json\n").size(), end = page.find("\n```", start);
  ASSERT_NE(end, std::string::npos);
  nlohmann::json grid = nlohmann::json::parse(page.substr(start, end - start));
  // Its base is named relative to configs/, where the shipped grids live.
  grid["base"] = (kRoot / "configs" / grid["base"].get<std::string>()).string();
  const fs::path file = fs::temp_directory_path() / ("posenc_docs_grid." + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << grid.dump();
  for (const bool full : {false, true})
    EXPECT_EQ(
        posenc::testing::error_of([&] { EXPECT_FALSE(plan_comparison(file.string(), "out", full, 1).runs.empty()); }),
        "(no error)")
        << (full ? "with --full" : "without --full");
  fs::remove(file);
}

TEST(Docs, TheReadmeNamesEveryScript) {
  const std::string readme = read_text(kRoot / "README.md");
  int scripts = 0;
  for (const auto& e : fs::directory_iterator(kRoot / "scripts")) {
    if (!e.is_regular_file()) continue;
    ++scripts;
    const std::string name = e.path().filename().string();
    EXPECT_NE(readme.find("`" + name + "`"), std::string::npos) << "README.md does not list scripts/" << name;
  }
  EXPECT_GT(scripts, 10);
}

// The scheme guide's step 4: a scheme family's file src/posenc/positional/F.cpp
// (one that defines a registry entry, *_scheme_info) has its tests in
// tests/test_schemes_F.cpp, so that a family's tests are found by its name.
TEST(Docs, EverySchemeFamilyHasTheTestFileOfItsName) {
  int families = 0;
  for (const auto& e : fs::directory_iterator(kRoot / "src" / "posenc" / "positional")) {
    if (e.path().extension() != ".cpp" || read_text(e.path()).find("_scheme_info() {") == std::string::npos) continue;
    ++families;
    const fs::path tests = kRoot / "tests" / ("test_schemes_" + e.path().stem().string() + ".cpp");
    EXPECT_TRUE(fs::exists(tests)) << e.path().filename() << " defines schemes, but " << tests.filename()
                                   << " does not exist";
  }
  EXPECT_GE(families, 8);
}

TEST(Docs, TheReadmeNamesEveryGoldenFixtureAndATestReadsIt) {
  const std::string readme = read_text(kRoot / "README.md");
  const std::string tests = read_text(kRoot / "tests" / "test_golden.cpp");
  int fixtures = 0;
  for (const auto& e : fs::directory_iterator(kRoot / "tests" / "golden")) {
    if (e.path().extension() != ".json") continue;
    ++fixtures;
    const std::string name = e.path().stem().string();
    EXPECT_NE(readme.find("`" + name + "`"), std::string::npos)
        << "README.md does not name tests/golden/" << name << ".json among the golden fixtures";
    EXPECT_NE(tests.find("\"" + name + "\""), std::string::npos)
        << "tests/test_golden.cpp never reads tests/golden/" << name << ".json";
  }
  EXPECT_GT(fixtures, 10);
}

// Every link between the README and the docs leads somewhere: a relative link
// names a file of the tree, and a #fragment one of its headings' anchors, so
// renaming a section or a file cannot leave a dead link behind.
TEST(Docs, EveryLinkBetweenThePagesLeadsToAFileAndAHeadingThatExist) {
  static const std::regex target("\\]\\(([^)\\s]+)\\)"), scheme("^[a-z]+:");
  std::map<fs::path, std::set<std::string>> anchors_of;
  int links = 0, fragments = 0;
  for (const auto& page : doc_pages()) {
    std::istringstream in(read_text(page));
    bool fenced = false;
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      if (fence_line(line)) fenced = !fenced;
      if (fenced) continue;
      for (std::sregex_iterator it(line.begin(), line.end(), target), end; it != end; ++it) {
        const std::string link = (*it)[1].str();
        if (std::regex_search(link, scheme)) continue;  // https:, mailto:
        const std::string where = fs::relative(page, kRoot).string() + ":" + std::to_string(number) + ": " + link;
        const size_t hash = link.find('#');
        const std::string file = link.substr(0, hash);
        const fs::path to = file.empty() ? page : (page.parent_path() / file).lexically_normal();
        ++links;
        if (!fs::exists(to)) {
          ADD_FAILURE() << where << " names a file that does not exist";
          continue;
        }
        if (hash == std::string::npos || to.extension() != ".md") continue;
        ++fragments;
        if (!anchors_of.count(to)) anchors_of[to] = heading_anchors(to);
        EXPECT_TRUE(anchors_of[to].count(link.substr(hash + 1)))
            << where << ": no heading of " << fs::relative(to, kRoot).string() << " has that anchor";
      }
    }
  }
  EXPECT_GT(links, 50) << "the pages link to each other less than they do";
  EXPECT_GT(fragments, 10);
}

// What a figure needs is the machine (CPU, cores, OS), the date and the
// command; who made it, and a source by a nickname, mean nothing to a user.
TEST(Docs, TheTreeSaysWhatPosencIsNotHowItWasMade) {
  const std::string outside = std::string("..") + "/shared";
  const std::vector<std::string> anywhere = {outside,  // the tree stands alone
                                             "the positional-encoding guide",
                                             "the ordering lesson",
                                             "the position-problem tutorial",
                                             "the ape notebook",
                                             std::string("earlier ") + "session",
                                             "this session",
                                             "the session",
                                             std::string("was ") + "lent",
                                             "were lent",
                                             "lent to",
                                             "seed 00",
                                             "seeds 00"};
  for (const auto& hit : lines_holding(tree_files(), anywhere)) ADD_FAILURE() << hit;
  // In the docs a measurement names its machine, not "this" one.
  for (const auto& hit : lines_holding(doc_pages(), {"this machine", "these 2 cores", "this 2-core"}))
    ADD_FAILURE() << hit << " (name the machine: CPU, cores, OS)";
}

}  // namespace POSENC_TEST_UNIT
