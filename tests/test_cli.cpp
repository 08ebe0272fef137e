// The CLI binary: one clear line and a non-zero exit on bad input; list and eval work.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <torch/cuda.h>
#include <torch/version.h>

#include "cli_helpers.h"
#include "helpers.h"
#include "posenc/bench/bench.h"
#include "posenc/config.h"
#include "posenc/environment.h"
#include "posenc/experiments/compare_plan.h"
#include "posenc/positional/registry.h"
#include "posenc/tasks/registry.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

namespace {

using posenc::testing::CliRun;
CliRun run(const std::string& args) { return posenc::testing::run_cli(args); }

std::string config_path() { return std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json"; }

}  // namespace

TEST(Cli, ListShowsEverySchemeAndTaskFromTheRegistries) {
  const CliRun r = run("list");
  EXPECT_EQ(r.code, 0);
  for (const auto& name : posenc::scheme_names())
    EXPECT_NE(r.output.find("\n" + name + "\n"), std::string::npos) << name;
  const CliRun j = run("list --json");
  const auto listed = posenc::json::parse(j.output);
  EXPECT_EQ(listed.at("schemes").size(), posenc::scheme_names().size());
  EXPECT_EQ(listed.at("tasks").size(), posenc::task_names().size());
  for (const auto& name : posenc::task_names()) EXPECT_NE(r.output.find("\n" + name + "\n"), std::string::npos) << name;
  // The config keys are listed block by block from the declarations the reader checks against.
  const auto& blocks = posenc::config_blocks();
  ASSERT_EQ(listed.at("config").size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(listed["config"][i]["block"], blocks[i].path);
    EXPECT_NE(r.output.find("\n" + blocks[i].path + ": "), std::string::npos) << blocks[i].path;
    ASSERT_EQ(listed["config"][i]["keys"].size(), blocks[i].keys.size()) << blocks[i].path;
    for (const auto& key : blocks[i].keys)
      EXPECT_NE(r.output.find("\n  " + key.name + " ("), std::string::npos) << blocks[i].path << "." << key.name;
  }
  // So are the keys of a comparison grid and of a bench file (with a bench size's numbers).
  const auto listed_names = [](const posenc::json& keys) {
    std::vector<std::string> names;
    for (const auto& k : keys) names.push_back(k.at("name").get<std::string>());
    return names;
  };
  const auto declared_names = [](const auto& keys) {
    std::vector<std::string> names;
    for (const auto& k : keys) names.push_back(k.name);
    return names;
  };
  EXPECT_EQ(listed_names(listed.at("grid_file")), declared_names(posenc::grid_file_keys()));
  EXPECT_EQ(listed_names(listed.at("bench_file").at("keys")), declared_names(posenc::bench_file_keys()));
  EXPECT_EQ(listed_names(listed.at("bench_file").at("size_keys")), declared_names(posenc::bench_size_keys()));
  for (const auto& key : posenc::grid_file_keys())
    EXPECT_NE(r.output.find("\n  " + key.name + " ("), std::string::npos) << "grid key " << key.name;
}

TEST(Cli, HelpShowsDefaults) {
  const CliRun r = run("eval --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("--threads"), std::string::npos);
  // The default thread count (1) is shown on the --threads line, however the
  // CLI11 release formats it ("=1" in 2.1, "[1]" in 2.4): drop the range
  // "[1 - 1024]" and a lone 1 must remain.
  std::string line;
  for (std::istringstream in(r.output); std::getline(in, line);)
    if (line.find("--threads") != std::string::npos) break;
  const std::string without_range = std::regex_replace(line, std::regex(R"(\[\d+ - \d+\])"), "");
  EXPECT_TRUE(std::regex_search(without_range, std::regex(R"((^|[^\d])1([^\d]|$))"))) << line;
}

TEST(Cli, BadConfigValueIsOneLineNamingThePath) {
  const CliRun r = run("train " + config_path() + " --set model.heads=3 --out /tmp/posenc_cli_never");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "error: " + config_path() + ": model.heads: 3 does not divide model.d_model 64\n");
  EXPECT_FALSE(std::filesystem::exists("/tmp/posenc_cli_never"));
}

TEST(Cli, UnknownSchemeAndBadFlagsFail) {
  const CliRun a = run("train " + config_path() + " --set model.positional.type=fancy");
  EXPECT_EQ(a.code, 2);
  EXPECT_NE(a.output.find("unknown positional scheme \"fancy\""), std::string::npos) << a.output;
  const CliRun b = run("train /no/such/config.json");
  EXPECT_NE(b.code, 0);
  EXPECT_NE(b.output.find("/no/such/config.json"), std::string::npos) << b.output;
  const CliRun c = run("train " + config_path() + " --threads 0");
  EXPECT_NE(c.code, 0);
  const CliRun d = run("frobnicate");
  EXPECT_NE(d.code, 0);
}

TEST(Cli, EvalRejectsAFileThatIsNotACheckpoint) {
  const auto path = std::filesystem::temp_directory_path() / "posenc_cli_bad.pt";
  std::ofstream(path) << "{}";
  const CliRun r = run("eval " + path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("not a posenc checkpoint"), std::string::npos) << r.output;
}

TEST(Cli, TrainThenEvalAtNewLengths) {
  const auto dir = std::filesystem::temp_directory_path() / ("posenc_cli_run_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const CliRun t =
      run("train " + config_path() +
          " --set train.steps=20 --set eval.lengths=[8] --set eval.samples_per_length=50 --no-progress --out " +
          dir.string());
  ASSERT_EQ(t.code, 0) << t.output;
  const CliRun e =
      run("eval " + (dir / "checkpoint.pt").string() + " --lengths 12,24 --samples 40 --set eval.wrong_answers=2");
  ASSERT_EQ(e.code, 0) << e.output;
  const auto results = posenc::read_json_file((dir / "results_eval.json").string());
  ASSERT_EQ(results["lengths"].size(), 2u);
  EXPECT_EQ(results["lengths"][1]["length"], 24);
  EXPECT_EQ(results["lengths"][1]["n"], 40);
  // 20 steps leave wrong answers at 24: two are kept, and shown.
  const int64_t wrong = results["lengths"][1]["n"].get<int64_t>() - results["lengths"][1]["correct"].get<int64_t>();
  ASSERT_GE(wrong, 2) << e.output;
  EXPECT_EQ(results["lengths"][1]["wrong_answers"].size(), 2u);
  EXPECT_NE(e.output.find("length 24: 2 of its " + std::to_string(wrong) + " wrong answers"), std::string::npos)
      << e.output;
  // Running train again into the same directory must not overwrite it.
  const CliRun again = run("train " + config_path() + " --set train.steps=20 --out " + dir.string());
  EXPECT_EQ(again.code, 2);
  EXPECT_NE(again.output.find("--resume"), std::string::npos);
}

// A trained score depends on the kernels its matrix products ran on (the same
// config and seed scored 0.117 and 0.217 on two machines whose OpenBLAS chose
// Cooperlake and Haswell kernels): results.json and results_eval.json say which.
TEST(Cli, ResultsRecordTheKernelsTheirNumbersCameFrom) {
  const auto dir = posenc::testing::fresh_dir("cli_env");
  const CliRun t = posenc::testing::run_cli(
      "train " + config_path() + " --set train.steps=5 --set eval.lengths=[8] --no-progress --out " + dir.string(),
      "ATEN_CPU_CAPABILITY=default");
  ASSERT_EQ(t.code, 0) << t.output;
  const CliRun e = run("eval " + (dir / "checkpoint.pt").string() + " --lengths 12 --samples 20");
  ASSERT_EQ(e.code, 0) << e.output;
  const auto trained = posenc::read_json_file((dir / "results.json").string()).at("environment");
  const auto evaluated = posenc::read_json_file((dir / "results_eval.json").string()).at("environment");
  for (const auto& env : {trained, evaluated}) {
    EXPECT_EQ(env.at("posenc"), posenc::build_commit());
    EXPECT_EQ(env.at("device"), torch::cuda::is_available() ? "cuda" : "cpu") << "train.device auto, as resolved";
    EXPECT_EQ(env.at("libtorch"), TORCH_VERSION);
    EXPECT_EQ(env.at("blas"), posenc::live_blas());
    EXPECT_EQ(env.at("blas_kernels"), posenc::blas_kernels()) << "the kernels this machine's OpenBLAS picks";
  }
  EXPECT_EQ(trained.at("ATEN_CPU_CAPABILITY"), "default") << "an override the user set is recorded";
  EXPECT_EQ(evaluated.contains("ATEN_CPU_CAPABILITY"), std::getenv("ATEN_CPU_CAPABILITY") != nullptr)
      << "and only where it was set";
  EXPECT_NE(t.output.find("(" + posenc::blas_kernels() + " kernels)"), std::string::npos) << t.output;
  std::filesystem::remove_all(dir);
}

TEST(Environment, OpenBlasKernelsNarrowerThanTheCpuAreReplacedOnlyWithOnesTheCpuRuns) {
  using posenc::faster_blas_kernels;
  using List = std::vector<std::string>;
  const posenc::CpuVectorUnits avx512{true, true}, avx2{true, false}, none{};
  // Below AVX2 (Intel family 6 model 207 under OpenBLAS 0.3.21: Prescott).
  EXPECT_EQ(faster_blas_kernels("Prescott", avx512), (List{"SkylakeX", "Haswell"}));
  EXPECT_EQ(faster_blas_kernels("Sandybridge", avx2), List{"Haswell"});
  EXPECT_EQ(faster_blas_kernels("Prescott", none), List{}) << "a CPU without AVX2 keeps OpenBLAS's pick";
  // AVX2 kernels on an AVX-512 CPU (15-25% slower than SkylakeX's on AMD's Zen 5).
  for (const char* avx2_kernels : {"Haswell", "Zen", "Excavator"}) {
    EXPECT_EQ(faster_blas_kernels(avx2_kernels, avx512), List{"SkylakeX"}) << avx2_kernels;
    EXPECT_EQ(faster_blas_kernels(avx2_kernels, avx2), List{}) << avx2_kernels << " is the widest an AVX2 CPU runs";
  }
  for (const char* avx512_kernels : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    EXPECT_EQ(faster_blas_kernels(avx512_kernels, avx512), List{}) << avx512_kernels << " is as wide as there is";
  EXPECT_EQ(faster_blas_kernels("unknown", avx512), List{}) << "not OpenBLAS";
  EXPECT_EQ(faster_blas_kernels("Zen5", avx512), List{}) << "kernels newer than the rule are left alone";
}

// On a CPU newer than its OpenBLAS (Debian 12's 0.3.21 picks Prescott on
// Intel's family 6 model 207), posenc runs the widest kernels the CPU does,
// says so and records it; a user's OPENBLAS_CORETYPE wins.
TEST(Cli, AnOpenBlasThatDoesNotKnowTheCpuIsSwitchedToKernelsTheCpuRuns) {
  if (posenc::blas_kernels() == "unknown") GTEST_SKIP() << "the BLAS here is not OpenBLAS";
  const auto dir = posenc::testing::fresh_dir("cli_kernels");
  const auto train = [&](const std::string& variables) {
    std::filesystem::remove_all(dir);
    const CliRun t = posenc::testing::run_cli(
        "train " + config_path() + " --set train.steps=3 --set eval.lengths=[8] --no-progress --out " + dir.string(),
        variables);
    EXPECT_EQ(t.code, 0) << t.output;
    return std::make_pair(t.output, posenc::read_json_file((dir / "results.json").string()).at("environment"));
  };
  // OPENBLAS_VERBOSE=2: OpenBLAS prints "Core: NAME" for each choice it makes, its own first.
  const auto [output, env] = train("env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2");
  std::smatch first;
  ASSERT_TRUE(std::regex_search(output, first, std::regex("Core: (\\w+)"))) << output;
  const std::string own = first[1];
  const auto better = posenc::faster_blas_kernels(own, posenc::cpu_vector_units());
  const bool said = output.find("posenc switched it") != std::string::npos;
  if (better.empty()) {
    EXPECT_EQ(env.at("blas_kernels"), own) << "OpenBLAS knew this CPU, or it has nothing faster";
    EXPECT_FALSE(env.contains("blas_kernels_replaced")) << env.dump();
    EXPECT_FALSE(said) << output;
  } else {
    const std::string used = env.at("blas_kernels");
    EXPECT_EQ(std::count(better.begin(), better.end(), used), 1) << own << " replaced by " << used;
    EXPECT_EQ(env.value("blas_kernels_replaced", ""), own) << env.dump();
    EXPECT_TRUE(said) << output;
  }
  EXPECT_FALSE(env.contains("OPENBLAS_CORETYPE")) << "no choice of the user's, and none handed down: " << env.dump();
  const auto [kept_output, kept] = train("OPENBLAS_CORETYPE=" + own);
  EXPECT_EQ(kept.at("blas_kernels"), own) << "the user's choice stays";
  EXPECT_EQ(kept_output.find("posenc switched it"), std::string::npos) << kept_output;
  EXPECT_FALSE(kept.contains("blas_kernels_replaced")) << kept.dump();
  std::filesystem::remove_all(dir);
}

// The processes posenc starts may run on another machine (a Slurm task, a
// data-parallel rank on another host), whose CPU may lack the kernels chosen
// here: the choice is not handed down in OPENBLAS_CORETYPE.
TEST(Environment, TheKernelSwitchIsNotHandedToOtherProcesses) {
  if (posenc::replaced_blas_kernels().empty())
    GTEST_SKIP() << "this suite's process did not switch OpenBLAS's kernels (OpenBLAS knew the CPU, or "
                    "OPENBLAS_CORETYPE was set)";
  EXPECT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr) << std::getenv("OPENBLAS_CORETYPE");
  EXPECT_NE(posenc::blas_kernels(), posenc::replaced_blas_kernels());
}

TEST(Cli, VersionNamesTheCommitItWasBuiltFrom) {
  const CliRun v = run("--version");
  EXPECT_EQ(v.code, 0) << v.output;
  EXPECT_EQ(v.output, posenc::version_line() + "\n");
  // The commit is the one the environment's POSENC_BUILD_COMMIT gave the
  // build, where set; else the checkout's HEAD (git asked here, apart from the
  // build's script); where git cannot say (a tarball, a copied tree), "unknown".
  // Only posenc's own checkout counts, not a repository a copied tree sits in.
  const bool checkout = std::filesystem::exists(std::filesystem::path(POSENC_SOURCE_DIR) / ".git");
  std::string head;
  if (checkout && posenc::run_command({"git", "-C", POSENC_SOURCE_DIR, "rev-parse", "--short=12", "HEAD"}, head) != 0)
    head.clear();
  head = head.substr(0, head.find('\n'));
  const std::string commit = posenc::build_commit();
  const char* given = std::getenv("POSENC_BUILD_COMMIT");  // where set, it names the commit, .git or not
  if (given && *given) {
    EXPECT_EQ(commit, given);
  } else if (head.empty()) {
    EXPECT_EQ(commit, "unknown");
  } else {
    EXPECT_EQ(commit.substr(0, head.size()), head) << "rebuild after committing: the binary predates HEAD";
    const std::string rest = commit.substr(head.size());
    EXPECT_TRUE(rest.empty() || rest == "-dirty" || rest == "-unknown-state") << commit;
  }
}

TEST(Cli, EvalAveragesTheWeightsOfCheckpointsOfOneModel) {
  const auto dir = posenc::testing::fresh_dir("cli_average");
  const auto train_run = [&](const std::string& name, const std::string& extra) {
    const CliRun t = run("train " + config_path() +
                         " --set train.steps=20 --set eval.lengths=[8] --set eval.samples_per_length=50 " + extra +
                         " --no-progress --out " + (dir / name).string());
    EXPECT_EQ(t.code, 0) << t.output;
    return (dir / name / "checkpoint.pt").string();
  };
  const std::string a = train_run("a", "--set train.seed=1"), b = train_run("b", "--set train.seed=2"),
                    wide = train_run("wide", "--set model.d_ff=128");
  const auto lengths = [&](const std::string& args, const std::string& out) {
    const CliRun e = run("eval " + args + " --lengths 8,16 --samples 60 --out " + (dir / out).string());
    EXPECT_EQ(e.code, 0) << e.output;
    return posenc::read_json_file((dir / out).string());
  };
  const auto alone = lengths(a, "alone.json");
  // The mean of a model with itself is that model: (w + w) / 2 is w exactly.
  EXPECT_EQ(lengths(a + " --average " + a, "self.json")["lengths"], alone["lengths"]);
  // A mean does not depend on the order of its terms.
  const auto ab = lengths(a + " --average " + b, "ab.json");
  EXPECT_EQ(ab["lengths"], lengths(b + " --average " + a, "ba.json")["lengths"]);
  EXPECT_EQ(ab["averaged_with"], nlohmann::json::array({b}));
  // An evaluation-time change of the scheme applies to the mean, not to what the checkpoints must share.
  lengths(a + " --average " + b + " --set model.positional.base=500", "ab-base.json");
  const CliRun other = run("eval " + a + " --average " + wide + " --lengths 8 --out " + (dir / "x.json").string());
  EXPECT_EQ(other.code, 2) << other.output;
  EXPECT_NE(other.output.find("not the model of " + a + " (their configs differ at /model/d_ff)"), std::string::npos)
      << other.output;
}

TEST(Cli, CharLmTrainsEvaluatesAndGenerates) {
  const auto dir = posenc::testing::fresh_dir("charlm_cli");
  std::filesystem::create_directories(dir);
  const auto corpus = dir / "corpus.txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 300; ++i) out << "abcdefgh ";
  }
  const std::string run_dir = (dir / "run").string();
  const CliRun trained =
      run("train " + std::string(POSENC_SOURCE_DIR) + "/configs/charlm.json --out " + run_dir +
          " --set task.path=" + corpus.string() +
          " --set task.min_length=16 --set task.max_length=16 --set model.d_model=32 --set model.heads=2"
          " --set model.layers=2 --set model.d_ff=64 --set train.steps=150 --set train.warmup_steps=20"
          " --set train.log_every=50 --set train.eval_every=150 --set train.val_samples=16"
          " --set eval.lengths=[16,32]");
  ASSERT_EQ(trained.code, 0) << trained.output;
  const auto results = posenc::read_json_file(run_dir + "/results.json");
  EXPECT_EQ(results.at("metric"), "perplexity");
  // A repeating 9-character cycle: far below the 256 of a uniform guess.
  EXPECT_LT(results.at("lengths").at(0).at("perplexity").get<double>(), 2.0) << results.dump();

  const CliRun g = run("generate " + run_dir + "/checkpoint.pt --prompt abcd --tokens 12 --temperature 0");
  ASSERT_EQ(g.code, 0) << g.output;
  EXPECT_NE(g.output.find("abcdefgh abcd"), std::string::npos) << g.output;
  const CliRun sampled =
      run("generate " + run_dir + "/checkpoint.pt --prompt abcd --tokens 12 --top-k 3 --seed 5 --out " +
          (dir / "sample.txt").string());
  ASSERT_EQ(sampled.code, 0) << sampled.output;
  std::ifstream written(dir / "sample.txt");
  const std::string text((std::istreambuf_iterator<char>(written)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.size(), 16u);

  // An ordering checkpoint cannot generate text, and says why.
  const std::string enc_dir = (dir / "enc").string();
  ASSERT_EQ(
      run("train " + config_path() + " --out " + enc_dir +
          " --set train.steps=2 --set model.d_model=16 --set model.heads=2 --set model.layers=1 --set model.d_ff=16"
          " --set eval.lengths=[8] --set eval.samples_per_length=8 --set train.val_samples=8")
          .code,
      0);
  const CliRun refused = run("generate " + enc_dir + "/checkpoint.pt --prompt abc");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.output.find("charlm"), std::string::npos) << refused.output;
  std::filesystem::remove_all(dir);
}

}  // namespace POSENC_TEST_UNIT
