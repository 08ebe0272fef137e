// The figures: scripts/plot_inspect.py over `posenc inspect` and `posenc
// attention` output, scripts/plot_runs.py over single runs' results, and a
// comparison's report, whose every figure link must lead to a PNG that
// scripts/plot_compare.py drew.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/positional/inspect.h"
#include "posenc/util/process.h"
#include "posenc/util/python.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

namespace fs = std::filesystem;
using namespace posenc;

namespace {

/// A python3 with what the figure scripts import, or "" (the test then skips);
/// looked up once (each look imports matplotlib, about a second).
const std::string& figure_python() {
  static const std::string python = find_python("matplotlib, numpy");
  return python;
}

#define SKIP_WITHOUT_FIGURE_PYTHON()                                                                  \
  if (figure_python().empty())                                                                        \
  GTEST_SKIP() << "no python3 with matplotlib and numpy (Debian: python3-matplotlib python3-numpy); " \
                  "CI installs them (scripts/setup.sh)"

/// Width and height of a PNG file; {0, 0} if the file is not a PNG.
std::pair<uint32_t, uint32_t> png_size(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  unsigned char head[24] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const unsigned char magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (in.gcount() != sizeof head || !std::equal(magic, magic + 8, head) || std::string(head + 12, head + 16) != "IHDR")
    return {0, 0};
  const auto be32 = [&](int at) {
    return (uint32_t(head[at]) << 24) | (uint32_t(head[at + 1]) << 16) | (uint32_t(head[at + 2]) << 8) | head[at + 3];
  };
  return {be32(16), be32(20)};
}

/// A figure: a PNG at least `min_side` pixels each way (matplotlib's smallest
/// figure here is several inches at 110 dpi).
void expect_figure(const fs::path& file, uint32_t min_side = 200) {
  const auto [w, h] = png_size(file);
  EXPECT_GE(w, min_side) << file << " is missing, not a PNG, or too small";
  EXPECT_GE(h, min_side) << file << " is missing, not a PNG, or too small";
}

/// `python3 scripts/SCRIPT ARGS...`: exit status and output.
posenc::testing::CliRun run_script(const std::string& script, std::vector<std::string> args) {
  std::vector<std::string> argv = {figure_python(), std::string(POSENC_SOURCE_DIR) + "/scripts/" + script};
  argv.insert(argv.end(), args.begin(), args.end());
  posenc::testing::CliRun r{0, ""};
  r.code = run_command(argv, r.output);
  return r;
}
posenc::testing::CliRun plot_inspect(std::vector<std::string> args) { return run_script("plot_inspect.py", args); }

}  // namespace

TEST(Figures, EverySchemeButNoneIsDrawnFromItsInspection) {
  // Every scheme that adds anything (an encoding, a rotation, a bias, score
  // terms, reweighting) has a figure; `none` says it has nothing to draw. One
  // Python process for all of them (matplotlib takes a second to import).
  SKIP_WITHOUT_FIGURE_PYTHON();
  posenc::testing::Scratch s("figures_schemes");
  // The descriptions `posenc inspect` writes, made here (a posenc process per
  // scheme would spend about a second each loading LibTorch); the first one
  // through the command itself, which must write the same.
  std::vector<std::string> files;
  for (const auto& name : scheme_names()) {
    files.push_back(s.path(name + ".json"));
    InspectRequest request;
    request.scheme = name;
    request.length = 12;
    request.heads = 2;
    request.dim = 16;
    json description = inspect_scheme(request);
    description[kWrittenBy] = "posenc inspect";
    write_file_atomic(files.back(), description.dump() + "\n");
  }
  const std::string first = scheme_names().front(), by_command = s.path("by-command.json");
  const auto cli =
      posenc::testing::run_cli("inspect " + first + " --length 12 --heads 2 --dim 16 --json " + by_command);
  ASSERT_EQ(cli.code, 0) << cli.output;
  EXPECT_EQ(read_json_file(by_command), read_json_file(files.front())) << first;
  const auto r = plot_inspect(files);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const auto& name : scheme_names()) {
    const auto caps = posenc::testing::scheme_with(name, {16, 2, 8, 0})->capabilities();
    if (caps.embed || caps.acts_in_attention()) {
      expect_figure(s.dir / (name + ".png"));
    } else {
      EXPECT_FALSE(fs::exists(s.dir / (name + ".png"))) << name;
      EXPECT_NE(r.output.find(name + ".json: " + name + " adds no positions: nothing to draw"), std::string::npos)
          << r.output;
    }
  }
}

TEST(Figures, PositionAndTaskTargetProbesAreDrawnAgainstTheLayer) {
  SKIP_WITHOUT_FIGURE_PYTHON();
  posenc::testing::Scratch s("figures_probe");
  const std::string run = posenc::testing::train_tiny(s, "decoder");
  const std::string file = s.path("probe.json");
  auto r = posenc::testing::run_cli("probe " + run + "/checkpoint.pt --lengths 6,8 --samples 8 --json " + file);
  ASSERT_EQ(r.code, 0) << r.output;
  // A task's own target (ordering's descent) is drawn with its rounded accuracy beside the baseline's.
  const std::string encoder = posenc::testing::train_tiny(s, "encoder"), descent = s.path("descent.json");
  r = posenc::testing::run_cli("probe " + encoder + "/checkpoint.pt --target descent --samples 8 --json " + descent);
  ASSERT_EQ(r.code, 0) << r.output;
  // An encoder_decoder's two stacks, with probes fitted at one length and read at another.
  const std::string both = posenc::testing::train_tiny(s, "encoder_decoder"), transfer = s.path("transfer.json");
  r = posenc::testing::run_cli("probe " + both + "/checkpoint.pt --lengths 6,8 --fit-lengths 6 --samples 8 --json " +
                               transfer);
  ASSERT_EQ(r.code, 0) << r.output;
  r = plot_inspect({file, descent, transfer});
  ASSERT_EQ(r.code, 0) << r.output;
  expect_figure(s.dir / "probe.png");
  expect_figure(s.dir / "descent.png");
  expect_figure(s.dir / "transfer.png");
  // --layer picks the layer of the mean-prediction panel; a negative one is refused.
  r = plot_inspect({transfer, "--layer", "1"});
  ASSERT_EQ(r.code, 0) << r.output;
  r = plot_inspect({transfer, "--layer", "-1"});
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--layer -1"), std::string::npos) << r.output;
}

TEST(Figures, AttentionMapsAndHeadStatisticsOfEveryModelKindAreDrawnAndBadFilesNamed) {
  SKIP_WITHOUT_FIGURE_PYTHON();
  posenc::testing::Scratch s("figures_attention");
  std::vector<std::string> files, heads;
  for (const std::string kind : {"encoder", "decoder", "encoder_decoder"}) {
    // Two steps of training: the maps need a checkpoint, not a trained model.
    const std::string run = posenc::testing::train_tiny(s, kind);
    files.push_back(s.path("attention_" + kind + ".json"));
    auto r = posenc::testing::run_cli("attention " + run + "/checkpoint.pt --length 6 --json " + files.back());
    ASSERT_EQ(r.code, 0) << r.output;
    heads.push_back(s.path("heads_" + kind + ".json"));
    r = posenc::testing::run_cli("heads " + run + "/checkpoint.pt --lengths 6,8 --samples 4 --json " + heads.back());
    ASSERT_EQ(r.code, 0) << r.output;
  }
  // Where each head looks, as a table: every block of every kind; an encoder_decoder's decoder rows are its
  // causal self-attention, which puts no mass right of the query.
  const auto stats = run_script("attention_stats.py", files);
  ASSERT_EQ(stats.code, 0) << stats.output;
  EXPECT_NE(stats.output.find("p(sorted) = "), std::string::npos) << stats.output;  // the ordering encoder
  EXPECT_NE(stats.output.find("encoder 0"), std::string::npos) << stats.output;
  std::istringstream lines(stats.output);
  int decoder_rows = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.find("decoder 0 self") != std::string::npos) {
      ++decoder_rows;
      std::istringstream cells(line.substr(line.find("self") + 4));  // head, left, self, right, ...
      double head = 0, left = 0, self = 0, right = -1;
      cells >> head >> left >> self >> right;
      EXPECT_EQ(right, 0.0) << line;
      EXPECT_NEAR(left + self, 1.0, 0.011) << line;  // two decimals each
    }
  EXPECT_EQ(decoder_rows, 2) << stats.output;  // one decoder block of two heads (small_config)
  // A file of another program's, and one that is not there: each named, the others still drawn.
  write_file_atomic(s.path("other.json"), "{\"layers\": []}\n");
  files.push_back(s.path("other.json"));
  files.push_back(s.path("missing.json"));
  files.push_back("/dev/zero");  // endless: refused before a byte is read
  const fs::path out = s.dir / "pngs";
  fs::create_directories(out);
  files.insert(files.end(), heads.begin(), heads.end());
  files.insert(files.end(), {"--out", out.string()});
  const auto r = plot_inspect(files);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("other.json: not written by `posenc inspect`, `posenc attention`, `posenc probe` or "
                          "`posenc heads`"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("missing.json: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/dev/zero: not a regular file"), std::string::npos) << r.output;
  for (const std::string kind : {"encoder", "decoder", "encoder_decoder"}) {
    expect_figure(out / ("attention_" + kind + ".png"));
    expect_figure(out / ("heads_" + kind + ".png"));
  }
  EXPECT_FALSE(fs::exists(out / "other.png"));
  for (const auto& [file, reason] :
       {std::pair<std::string, std::string>{s.path("other.json"), "not written by `posenc attention`"},
        {"/dev/zero", "not a regular file"}}) {
    const auto bad_stats = run_script("attention_stats.py", {file});
    EXPECT_EQ(bad_stats.code, 2) << bad_stats.output;
    EXPECT_NE(bad_stats.output.find(file + ": " + reason), std::string::npos) << bad_stats.output;
  }
}

TEST(Figures, SingleRunsAreDrawnAgainstLengthAndMixedMetricsRefused) {
  SKIP_WITHOUT_FIGURE_PYTHON();
  posenc::testing::Scratch s("figures_runs");
  const std::string encoder = posenc::testing::train_tiny(s, "encoder"),
                    decoder = posenc::testing::train_tiny(s, "decoder");
  auto r = posenc::testing::run_cli("eval " + encoder + "/checkpoint.pt --lengths 8,16,32");
  ASSERT_EQ(r.code, 0) << r.output;
  // A run directory (its results.json) beside an eval's results file: one figure.
  r = run_script("plot_runs.py", {encoder, encoder + "/results_eval.json", "--out", s.path("lengths.png")});
  ASSERT_EQ(r.code, 0) << r.output;
  expect_figure(s.path("lengths.png"));
  // Accuracy beside exact match would share an axis that means two things: refused, nothing written.
  r = run_script("plot_runs.py", {encoder, decoder, "--out", s.path("mixed.png")});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("different metrics (accuracy, exact_match)"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(s.path("mixed.png")));
  // A length whose outputs were all NaN or inf has a null score (and interval): a gap, not a crash.
  json unmeasured = read_json_file(encoder + "/results_eval.json");
  unmeasured["lengths"][2]["accuracy"] = nullptr;
  unmeasured["lengths"][2]["ci95"] = {nullptr, nullptr};
  write_file_atomic(s.path("unmeasured.json"), unmeasured.dump());
  r = run_script("plot_runs.py", {s.path("unmeasured.json"), "--out", s.path("unmeasured.png")});
  ASSERT_EQ(r.code, 0) << r.output;
  expect_figure(s.path("unmeasured.png"));
  // Files given one label pool into one line: right answers over examples at each length they all hold,
  // with the Wilson interval of the sums, printed. A copy with no right answer at length 8 halves that score.
  const json measured = read_json_file(encoder + "/results_eval.json");
  json none_right = measured;
  none_right["lengths"][0]["correct"] = 0;
  write_file_atomic(s.path("none_right.json"), none_right.dump());
  r = run_script("plot_runs.py", {encoder + "/results_eval.json", s.path("none_right.json"), "--labels", "seeds,seeds",
                                  "--out", s.path("pooled.png")});
  ASSERT_EQ(r.code, 0) << r.output;
  expect_figure(s.path("pooled.png"));
  const int64_t k = measured["lengths"][0]["correct"], n = measured["lengths"][0]["n"];
  EXPECT_NE(r.output.find(fmt::format("seeds (2 files): 8: {:.3f} [", static_cast<double>(k) / (2.0 * n))),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(fmt::format("({}/{})", k, 2 * n)), std::string::npos) << r.output;
  // A file without example counts cannot be pooled: named, nothing drawn.
  none_right["lengths"][1].erase("correct");
  write_file_atomic(s.path("no_counts.json"), none_right.dump());
  r = run_script("plot_runs.py", {encoder + "/results_eval.json", s.path("no_counts.json"), "--labels", "a,a", "--out",
                                  s.path("no_counts.png")});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no_counts.json: length 16 has no example counts"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(s.path("no_counts.png")));
  // Perplexities pool as exp of the mean log-likelihood over every file's tokens: 4 over 100 tokens and 9
  // over 300 give 4^(1/4) 9^(3/4) = 7.348, not their mean 6.5; a file without token counts is named.
  const auto perplexity_file = [&](const std::string& name, double perplexity, const json& tokens) {
    json row = {{"length", 64}, {"perplexity", perplexity}, {"ci95", {0.4, 0.5}}};
    if (!tokens.is_null()) row["tokens"] = tokens;
    write_file_atomic(s.path(name), json{{"metric", "perplexity"}, {"lengths", {row}}}.dump());
    return s.path(name);
  };
  const std::string four = perplexity_file("four.json", 4.0, 100), nine = perplexity_file("nine.json", 9.0, 300);
  r = run_script("plot_runs.py", {four, nine, "--labels", "lm,lm", "--out", s.path("lm.png")});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("lm (2 files): 64: 7.348 (400 tokens)"), std::string::npos) << r.output;
  expect_figure(s.path("lm.png"));
  r = run_script("plot_runs.py", {four, perplexity_file("untold.json", 9.0, nullptr), "--labels", "lm,lm", "--out",
                                  s.path("untold.png")});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("untold.json: length 64 has no token counts"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(s.path("untold.png")));
  // Not a results file: named.
  r = run_script("plot_runs.py", {encoder + "/config.json", "--out", s.path("config.png")});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("config.json: not a results file"), std::string::npos) << r.output;
  r = run_script("plot_runs.py", {"/dev/zero", "--out", s.path("zero.png")});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("/dev/zero: not a regular file"), std::string::npos) << r.output;
}

TEST(Figures, EveryFigureAComparisonReportLinksWasDrawn) {
  // A grid of an added encoding, a bias, score terms, a bias beside a learned
  // table before block 1 and a rotation with a bias in one attention, with
  // figures on: report.md links the accuracy and training figures and each
  // scheme's own (three for each pair), and each link leads to a PNG the
  // script drew.
  SKIP_WITHOUT_FIGURE_PYTHON();
  posenc::testing::Scratch s("figures_compare");
  auto grid = posenc::testing::tiny_grid();
  grid["schemes"] = {
      "sinusoidal",
      "alibi",
      "xl",
      {{"name", "alibi-learned"}, {"set", {{"model.positional.type", "alibi"}, {"model.positional.input", "learned"}}}},
      {{"name", "rope-alibi"}, {"set", {{"model.positional.type", "rope"}, {"model.positional.with", "alibi"}}}}};
  write_file_atomic(s.path("grid.json"), grid.dump(2));
  const std::string out = s.path("out");
  const auto r = posenc::testing::run_cli("compare " + s.path("grid.json") + " --jobs 2 --no-progress --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(out + "/report.md");
  const std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> linked;
  const std::regex link(R"(\]\(figures/([^)]+\.png)\))");
  for (auto it = std::sregex_iterator(report.begin(), report.end(), link); it != std::sregex_iterator(); ++it)
    linked.insert((*it)[1].str());
  for (const std::string name : {"accuracy_vs_length.png", "training_curves.png"})
    EXPECT_TRUE(linked.count(name)) << name << " is not linked from report.md";
  for (const std::string scheme : {"sinusoidal", "alibi", "xl", "alibi-learned", "rope-alibi"})
    for (const std::string kind : {"scheme_", "attention_"}) {
      const std::string name = kind + scheme + "-projected-max.png";
      EXPECT_TRUE(linked.count(name)) << name << " is not linked from report.md";
    }
  // The second scheme of a model with one before block 1 has its own figure.
  EXPECT_TRUE(linked.count("scheme_alibi-learned-projected-max.input.png")) << report;
  EXPECT_TRUE(linked.count("scheme_rope-alibi-projected-max.with.png")) << report;
  for (const auto& name : linked) expect_figure(fs::path(out) / "figures" / name);

  // A summary with a length no run could score (null: outputs all NaN or inf) is still drawn.
  json summary = read_json_file(out + "/summary.json");
  summary["variants"][0]["lengths"][1]["accuracy"]["mean"] = nullptr;
  summary["variants"][0]["lengths"][1]["ci95"] = {nullptr, nullptr};
  fs::create_directories(s.path("unmeasured"));
  write_file_atomic(s.path("unmeasured/summary.json"), summary.dump());
  const auto plotted = run_script("plot_compare.py", {s.path("unmeasured")});
  ASSERT_EQ(plotted.code, 0) << plotted.output;
  expect_figure(s.dir / "unmeasured" / "figures" / "accuracy_vs_length.png");

  // The script compare starts (POSENC_PARENT_PID names compare) ends when compare is killed with SIGKILL,
  // which compare cannot pass on: a shell stands for compare here, killed as soon as the script is started.
  fs::remove_all(fs::path(out) / "figures");
  const std::string pid_file = s.path("script.pid");
  const std::string line = "POSENC_PARENT_PID=$$ " + figure_python() + " " + POSENC_SOURCE_DIR +
                           "/scripts/plot_compare.py " + out + " >" + s.path("script.log") + " 2>&1 & echo $! >" +
                           pid_file + "; wait";
  const pid_t parent = ::fork();
  if (parent == 0) {
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const pid_t script = posenc::testing::pid_written_to(pid_file, 30);
  ASSERT_GT(script, 0) << "the shell did not start the script";
  ::kill(parent, SIGKILL);
  ::waitpid(parent, nullptr, 0);
  const bool ended = posenc::testing::wait_for([&] { return !posenc::testing::process_running(script); }, 30);
  if (!ended) ::kill(script, SIGKILL);
  EXPECT_TRUE(ended) << "the figure script outlived the process that started it:\n" << read_file(s.path("script.log"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "figures" / "accuracy_vs_length.png")) << read_file(s.path("script.log"));
}

// scripts/carry_errors.py reads the wrong answers posenc keeps: a hand-made
// file whose arithmetic is known, then a real run's, all of whose answers are
// wrong, as both the answers and the evaluation sets.
TEST(Scripts, CarryErrorsReadsTheWrongAnswersPosencKeeps) {
  SKIP_WITHOUT_FIGURE_PYTHON();
  posenc::testing::Scratch s("carry_errors");
  // 37 x 1, b written beside each digit of a: the columns sum to 7, 3, 0, 0, 0.
  const json hand = json::parse(R"({"lengths": [{"length": 2, "n": 2, "correct": 0, "wrong_answers": [
    {"example": 0, "prompt": "7 b0:1 b1:0 b2:0 3 b0:1 b1:0 b2:0 *", "reference": "r7 c0 r3 c0 r0 c0 r0 c0 r0 c0",
     "answer": "r7 c0 r5 c0 r0 c0 r0 c0 r0 c0", "first_wrong_token": 2,
     "first_wrong_choices": [["r5", 0.5], ["r3", 0.3], ["r8", 0.1], ["c1", 0.05], ["r1", 0.03]],
     "right_token_probability": 0.3},
    {"example": 1, "prompt": "7 b0:1 b1:0 b2:0 3 b0:1 b1:0 b2:0 *", "reference": "r7 c0 r3 c0 r0 c0 r0 c0 r0 c0",
     "answer": "r7 c1 r4 c0 r0 c0 r0 c0 r0 c0", "first_wrong_token": 1}]}]})");
  write_file_atomic(s.path("hand.json"), hand.dump());
  auto r = run_script("carry_errors.py", {s.path("hand.json"), "--samples", "100", "--digits", "2-10"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2 wrong answers: first wrong at a product digit 1, at a carry 1"), std::string::npos)
      << r.output;
  // The digit 5 and carry 0 spell 5 for a column of 3; the carry 1 after the digit 7, 17 for 7.
  EXPECT_NE(r.output.find("+2: 1, +10: 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("columns of 100 random 2-10 x 3-digit products"), std::string::npos) << r.output;
  // Its choices: the right 3 second; of the digits' 0.93, the odd 5, 3 and 1 hold 0.83.
  EXPECT_NE(r.output.find("the right digit its second choice in 1, among its kept likeliest in 1; median probability "
                          "of the digit written 0.500, of the right one 0.300; digits of the right one's parity hold "
                          "0.99 or more of the choices' probability in 0 of 1 (median 0.892)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(run_script("carry_errors.py", {s.path("hand.json"), "--digits", "0-3"}).output.find("1 <= A <= B"),
            std::string::npos);
  // As its own sets (it keeps both answers of its length): answer 0 reached
  // columns 0 and 1 and went wrong at 1, answer 1 went wrong at 0; their sums are 7 and 3.
  r = run_script("carry_errors.py", {s.path("hand.json"), "--sets", s.path("hand.json")});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("over 1 file(s):\n  0-99: 2 of 3 (0.67)\n"), std::string::npos) << r.output;
  json partial = hand;
  partial["lengths"][0]["n"] = 3;
  write_file_atomic(s.path("partial.json"), partial.dump());
  r = run_script("carry_errors.py", {s.path("partial.json"), "--sets", s.path("hand.json")});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("keeps 2 of its 3 wrong answers at length 2"), std::string::npos)
      << "error rates need every wrong answer" << r.output;
  EXPECT_EQ(r.output.find("error rate per column"), std::string::npos) << r.output;

  // A run of two steps gets every product wrong and keeps them all.
  json config = json::object();
  for (const std::string& o : std::vector<std::string>{
           "model.kind=\"decoder\"", "model.d_model=32", "model.heads=2", "model.layers=1", "model.d_ff=64",
           "task.type=\"multiplication\"", "task.min_length=2", "task.max_length=4", "task.multiplier_digits=3",
           "task.multiplier_placement=\"beside_each_digit\"", "task.answer_tokens=\"own\"",
           "task.multiplier_tokens=\"per_digit\"", "task.carries=\"written\"", "train.steps=2", "train.val_samples=8",
           "eval.lengths=[6]", "eval.samples_per_length=8", "eval.wrong_answers=8"})
    apply_override(config, o);
  write_file_atomic(s.path("n_by_3.json"), config.dump());
  const auto trained = posenc::testing::run_cli("train " + s.path("n_by_3.json") + " --out " + s.path("run"));
  ASSERT_EQ(trained.code, 0) << trained.output;
  const std::string results = s.path("run") + "/results.json";
  ASSERT_EQ(read_json_file(results)["lengths"][0]["wrong_answers"].size(), 8u) << "two steps get every product wrong";
  r = run_script("carry_errors.py", {results, "--sets", results});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("8 wrong answers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("columns of the evaluation sets at 6 digits"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("with the model's choices kept"), std::string::npos) << "posenc keeps them" << r.output;
  // A file with no wrong answers kept, as --sets or alone: refused, saying why.
  write_file_atomic(s.path("none.json"), R"({"lengths": [{"length": 6, "n": 8, "correct": 8}]})");
  r = run_script("carry_errors.py", {results, "--sets", s.path("none.json")});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("0 of the 8 answers at length 6 kept"), std::string::npos) << r.output;
  r = run_script("carry_errors.py", {s.path("none.json")});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("no wrong answers in these files"), std::string::npos) << r.output;
}

}  // namespace POSENC_TEST_UNIT
