// posenc bench and the fast paths: FLOP counts from shapes, the fused and the
// explicit attention paths agree, long-length evaluation stays bounded, and the
// PyTorch-eager twin (scripts/bench_eager.py) computes the same loss.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli_helpers.h"
#include "fused_check.h"
#include "helpers.h"
#include "posenc/tasks/ordering.h"
#include "posenc/bench/bench.h"
#include "posenc/compat.h"
#include "posenc/config.h"
#include "posenc/model/transformer.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/trainer.h"
#include "posenc/util/io.h"
#include "posenc/util/process.h"
#include "posenc/util/python.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

namespace fs = std::filesystem;
using posenc::Config;
using posenc::json;
using posenc::Transformer;
using posenc::testing::config_with;
using posenc::testing::error_of;
using posenc::testing::wait_exit_within;
using posenc::testing::wait_for;

TEST(Flops, CountedFromShapes) {
  const Config c = config_with({"model.positional.type=\"none\"", "model.pooling=\"max\""});
  Transformer model(c.model, task_vocab_size(c.task));
  const double B = 2, L = 5, D = 64, F = 256;
  const double per_layer = 2 * B * L * D * 3 * D + 2 * 2 * B * L * L * D + 2 * B * L * D * D + 2 * 2 * B * L * D * F;
  EXPECT_DOUBLE_EQ(model->forward_flops(2, 5), 3 * per_layer + 2 * B * D * 2);

  // Embedded QKV has no W_qkv in block 1; Shaw adds q·a^K and probs·a^V per layer (R = 33, Dh = 16).
  Transformer embedded(config_with({"model.positional.type=\"none\"", "model.attention.qkv=\"embedded\""}).model, 64);
  EXPECT_DOUBLE_EQ(model->forward_flops(2, 5) - embedded->forward_flops(2, 5), 2 * B * L * D * 3 * D);
  Transformer shaw(config_with({"model.positional.type=\"shaw\""}).model, 64);
  EXPECT_DOUBLE_EQ(shaw->forward_flops(2, 5) - model->forward_flops(2, 5), 3 * 2 * (2 * B * 4 * L * 33 * 16));
  Transformer xl(config_with({"model.positional.type=\"xl\""}).model, 64);
  EXPECT_GT(xl->forward_flops(2, 5), model->forward_flops(2, 5));
}

TEST(FastPath, FusedAndExplicitAttentionAgree) {
  if (!posenc::compat::kHasSdpa)
    GTEST_SKIP() << "LibTorch " << posenc::compat::kTorchMajor << "." << posenc::compat::kTorchMinor
                 << " has no scaled_dot_product_attention: only the explicit path exists";
  const auto schemes = posenc::testing::fused_path_schemes();
  ASSERT_GE(schemes.size(), 5u);  // none, absolute schemes, rope, the bias family
  for (const auto& scheme : schemes)
    for (bool bf16 : {false, true}) posenc::testing::expect_fused_matches_explicit(scheme, torch::kCPU, bf16);
}

TEST(LongEvaluation, BatchIsBoundedByTheScoreTensorAndLength4096Runs) {
  const Config c = config_with({"model.positional.type=\"alibi\""});
  Transformer model(c.model, task_vocab_size(c.task));
  EXPECT_EQ(posenc::evaluation_batch_size(model, 4096, c.eval.max_batch_tokens), 1);
  EXPECT_EQ(posenc::evaluation_batch_size(model, 16, c.eval.max_batch_tokens), 4096);
  const int64_t at_512 = posenc::evaluation_batch_size(model, 512, c.eval.max_batch_tokens);
  EXPECT_LE(at_512 * c.model.heads * 512 * 512, posenc::kMaxScoreElements);
  const posenc::OrderingTask task(c.task);
  const auto set = task.fixed_set(4096, 2, 7);
  const auto tally = posenc::score_set(model, set, torch::kCPU, c.eval.max_batch_tokens);
  int64_t n = 0;
  for (const auto& [_, t] : tally) n += t.n;
  EXPECT_EQ(n, 2);
}

namespace {

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("posenc_bench_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

json tiny_bench() {
  json schemes = json::array();
  for (const auto& name : posenc::scheme_names()) schemes.push_back(name);
  schemes.push_back(
      {{"name", "shaw-scaled"}, {"set", {{"model.positional.type", "shaw"}, {"model.positional.head_scales", true}}}});
  schemes.push_back(
      {{"name", "alibi-dir"}, {"set", {{"model.positional.type", "alibi"}, {"model.positional.directional", true}}}});
  schemes.push_back(
      {{"name", "learned-scaled-cls"},
       {"set", {{"model.positional.type", "learned"}, {"model.positional.scaled", true}, {"model.pooling", "cls"}}}});
  schemes.push_back({{"name", "rope-partial-mean"},
                     {"set",
                      {{"model.positional.type", "rope"},
                       {"model.positional.fraction", 0.5},
                       {"model.positional.layout", "interleaved"},
                       {"model.pooling", "mean"}}}});
  return {{"base", std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json"},
          {"schemes", schemes},
          {"qkv", {"projected", "embedded"}},
          {"sizes", {{{"name", "tiny"}, {"batch_size", 8}, {"length", 12}, {"warmup", 1}, {"timed", 2}}}}};
}

}  // namespace

TEST(Bench, PlanErrorsNameTheEntry) {
  Scratch s;
  json b = tiny_bench();
  const std::string path = (s.dir / "b.json").string();
  std::ofstream(path) << b.dump();
  EXPECT_EQ(posenc::plan_bench(path, {}, {"rope"}, 1, "cpu").size(), 2u);
  EXPECT_THROW(posenc::plan_bench(path, {"huge"}, {}, 1, "cpu"), posenc::ConfigError);
  EXPECT_THROW(posenc::plan_bench(path, {}, {"fancy"}, 1, "cpu"), posenc::ConfigError);
  b["sizes"][0].erase("length");
  std::ofstream(path) << b.dump();
  try {
    posenc::plan_bench(path, {}, {}, 1, "cpu");
    FAIL() << "no error";
  } catch (const posenc::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sizes[0].length: required"), std::string::npos) << e.what();
  }
}

// Every bench file shipped in configs/ passes the checks of every size, and plans its first size on this machine
// (the larger sizes of bench_gpu.json are meant for a GPU's memory).
TEST(Bench, EveryShippedBenchFilePlans) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(POSENC_SOURCE_DIR) / "configs")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("bench", 0) != 0 || entry.path().extension() != ".json") continue;
    ++files;
    const json spec = posenc::read_json_file(entry.path().string());
    const std::string first = spec.at("sizes").at(0).at("name").get<std::string>();
    EXPECT_EQ(error_of([&] { EXPECT_FALSE(posenc::plan_bench(entry.path().string(), {first}, {}, 1, "cpu").empty()); }),
              "(no error)")
        << name;
  }
  EXPECT_GE(files, 4);
}

// The file's top-level keys are checked for the shapes bench_file_keys() declares.
TEST(Bench, TheFilesKeysHaveTheirDeclaredShapes) {
  Scratch s;
  const std::string path = (s.dir / "b.json").string();
  const auto error_with = [&](const std::function<void(json&)>& edit) {
    json b = tiny_bench();
    edit(b);
    std::ofstream(path) << b.dump();
    return error_of([&] { posenc::plan_bench(path, {}, {}, 1, "cpu"); });
  };
  EXPECT_NE(error_with([](json& b) { b["schemes"] = "rope"; }).find("b.json.schemes: expected \"all\" or a non-empty"),
            std::string::npos);
  EXPECT_NE(error_with([](json& b) { b.erase("schemes"); }).find("b.json.schemes: required"), std::string::npos);
  EXPECT_NE(error_with([](json& b) { b["sizes"] = {1}; }).find("b.json.sizes: expected a non-empty array of objects"),
            std::string::npos);
  EXPECT_NE(error_with([](json& b) { b["description"] = 1; }).find("b.json.description: expected a string, got 1"),
            std::string::npos);
  EXPECT_NE(error_with([](json& b) { b["seeds"] = {0}; }).find("b.json.seeds: unknown key"), std::string::npos);
  EXPECT_EQ(error_with([](json& b) { b["schemes"] = "all"; }), "(no error)");
}

// A size's numbers are declared: the batch and the length take
// train.batch_size's and task.max_length's bounds, the step counts at most
// 10,000, and a step that cannot fit in memory is refused before any case runs.
TEST(Bench, ASizesNumbersAreCheckedAsDeclaredAndAStepThatCannotFitIsRefusedFirst) {
  Scratch s;
  const std::string path = (s.dir / "b.json").string();
  const auto error_with = [&](const std::string& key, const json& value) {
    json b = tiny_bench();
    b["sizes"][0][key] = value;
    std::ofstream(path) << b.dump();
    try {
      posenc::plan_bench(path, {}, {"rope"}, 1, "cpu");
    } catch (const posenc::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const auto range = [](const std::string& key) {
    const posenc::OptionSpec& spec = posenc::config_key(key);
    return "[" + posenc::shown_bound(spec, spec.min) + ", " + posenc::shown_bound(spec, spec.max) + "]";
  };
  EXPECT_NE(error_with("batch_size", 1).find("sizes[0].batch_size: 1 is out of range " + range("train.batch_size")),
            std::string::npos);
  EXPECT_NE(error_with("length", 1 << 21).find("sizes[0].length: 2097152 is out of range " + range("task.max_length")),
            std::string::npos);
  EXPECT_NE(error_with("timed", 10001).find("sizes[0].timed: 10001 is out of range [1, 10000]"), std::string::npos);
  EXPECT_NE(error_with("warmup", 0).find("sizes[0].warmup: 0 is out of range [1, 10000]"), std::string::npos);
  EXPECT_NE(error_with("warmup", "5").find("sizes[0].warmup: expected an integer"), std::string::npos);
  EXPECT_NE(error_with("lenght", 12).find("sizes[0].lenght: unknown key"), std::string::npos);
  {
    json b = tiny_bench();
    b["description"] = 7;
    std::ofstream(path) << b.dump();
    EXPECT_THROW(posenc::plan_bench(path, {}, {"rope"}, 1, "cpu"), posenc::ConfigError) << "a description not a string";
  }
  EXPECT_EQ(error_with("timed", 10000), "(no error)");
  // A million examples of 512 tokens: terabytes, refused by the plan with what to lower.
  json b = tiny_bench();
  b["sizes"][0]["batch_size"] = 1 << 20;
  b["sizes"][0]["length"] = 512;
  std::ofstream(path) << b.dump();
  const auto r =
      posenc::testing::run_cli("bench " + path + " --no-python --schemes rope --out " + (s.dir / "out").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("a training step needs about"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lower " + path + ".sizes[0].batch_size or .length"), std::string::npos) << r.output;
}

// SIGTERM stops bench between two steps of a case, not after the case's last.
TEST(Bench, SigtermStopsWithinACaseOfManySteps) {
  Scratch s;
  json b = tiny_bench();
  b["sizes"][0]["warmup"] = 10000;
  b["sizes"][0]["timed"] = 10000;
  const std::string path = (s.dir / "b.json").string(), log = (s.dir / "log").string();
  std::ofstream(path) << b.dump();
  const pid_t pid = posenc::testing::start_cli(
      {"bench", path, "--no-python", "--schemes", "none", "--out", (s.dir / "out").string()}, log);
  // The plan line comes after the matrix-product peak, just before the first case's model is built.
  // The child opens its log after the fork: it may not be there yet.
  ASSERT_TRUE(wait_for(
      [&] { return fs::exists(log) && posenc::read_file(log).find("cases on cpu") != std::string::npos; }, 120))
      << posenc::read_file(log);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // into the case's 20,000 steps
  ::kill(pid, SIGTERM);
  const int code = wait_exit_within(pid, 600);
  const std::string text = posenc::read_file(log);
  EXPECT_EQ(code, 128 + SIGTERM) << text;
  EXPECT_NE(text.find("bench stopped by SIGTERM after 0 of 2 cases"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(s.dir / "out" / "bench.json"));
}

// SIGTERM to posenc alone (as `timeout` sends it) while the PyTorch twin
// times its side: bench stops at once and ends the twin, rather than waiting
// for the twin's answer. The twin here takes the request and never answers.
TEST(Bench, SigtermWhileThePythonTwinTimesEndsTheTwinAndStops) {
  Scratch s;
  const std::string fake = posenc::testing::stand_in_python(s.dir, true);
  json b = tiny_bench();
  b["qkv"] = {"projected"};
  const std::string path = (s.dir / "b.json").string(), log = (s.dir / "log").string();
  std::ofstream(path) << b.dump();
  ::setenv("POSENC_PYTHON", fake.c_str(), 1);
  const pid_t pid =
      posenc::testing::start_cli({"bench", path, "--schemes", "none", "--out", (s.dir / "out").string()}, log);
  ::unsetenv("POSENC_PYTHON");
  // The twin writes its pid once it has the request: bench is then waiting for its answer.
  const int twin = posenc::testing::stand_in_python_pid(s.dir, 120);
  ASSERT_GT(twin, 0);
  ::kill(pid, SIGTERM);
  const int code = wait_exit_within(pid, 60);  // -1: still waiting, killed
  if (code == -1 && twin > 0) ::kill(twin, SIGKILL);
  const std::string text = posenc::read_file(log);
  ASSERT_NE(code, -1) << "bench waited for a twin that never answers:\n" << text;
  EXPECT_EQ(code, 128 + SIGTERM) << text;
  EXPECT_NE(text.find("bench stopped by SIGTERM after 0 of 1 cases"), std::string::npos) << text;
  EXPECT_NE(::kill(twin, 0), 0) << "the twin (pid " << twin << ") outlived bench";
}

// The twin's kernel profile (POSENC_BENCH_PROFILE, scripts/step_profile.py)
// sums GPU time by kind of kernel: its classes, and its telling PyTorch's range
// marks from kernels, are checked on kernel names such as an H200 runs.
TEST(Bench, TheKernelProfileClassesKernelsByWhatTheyDo) {
  const std::string python = posenc::find_python("sys");
  if (python.empty()) GTEST_SKIP() << "no python3";
  std::string out;
  const int code =
      posenc::run_command({python, std::string(POSENC_SOURCE_DIR) + "/scripts/step_profile.py", "--selftest"}, out);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("classified as expected"), std::string::npos) << out;
}

// The PyTorch twin must compute the same loss as the C++ model on the same
// weights and batch, for every scheme and both attention variants.
TEST(Bench, PythonTwinComputesTheSameLoss) {
  if (posenc::find_python("torch").empty())  // the same search posenc bench makes
    GTEST_SKIP()
        << "no python3 with torch: the parity check needs Debian's python3-torch (scripts/setup.sh installs it)";
  Scratch s;
  const std::string path = (s.dir / "b.json").string();
  std::ofstream(path) << tiny_bench().dump();
  const auto r = posenc::testing::run_cli("bench " + path + " --out " + (s.dir / "out").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const json out = posenc::read_json_file((s.dir / "out" / "bench.json").string());
  int checked = 0;
  for (const auto& c : out["cases"]) {
    if (c.contains("skipped")) continue;
    ASSERT_TRUE(c.contains("python")) << c.dump();
    EXPECT_TRUE(c["python"]["parity_ok"].get<bool>())
        << c["scheme"] << " " << c["qkv"] << ": C++ " << c["python"]["parity_cpp_loss"] << " vs Python "
        << c["python"]["parity_python_loss"];
    EXPECT_EQ(c["python"]["parameters"], c["parameters"]) << c["scheme"];
    EXPECT_GT(c["train_ms"].get<double>(), 0);
    EXPECT_GT(c["flops_per_step"].get<double>(), 0);
    ++checked;
  }
  EXPECT_GE(checked, 2 * static_cast<int>(posenc::scheme_names().size()));
}

TEST(Precision, Bf16AutocastTrainsAndBadValuesAreRejected) {
  Config c = config_with({"train.precision=\"bf16\"", "train.steps=3", "train.val_samples=16", "train.eval_every=3",
                          "eval.lengths=[8]", "eval.samples_per_length=16", "train.log_every=1"});
  const fs::path dir = fs::temp_directory_path() / ("posenc_bf16_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  c.train.out_dir = dir.string();
  posenc::TrainRequest options;
  const auto result = posenc::train(c, options);
  EXPECT_TRUE(std::isfinite(result.final_loss));
  fs::remove_all(dir);
  EXPECT_THROW(config_with({"train.precision=\"fp16\""}), posenc::ConfigError);
}

TEST(Bench, AllStandsForEveryRegisteredScheme) {
  const auto dir = posenc::testing::fresh_dir("bench_all");
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "bench.json").string();
  {
    std::ofstream out(file);
    out << R"({"base": ")" << POSENC_SOURCE_DIR << R"(/configs/ordering.json", "qkv": ["projected"], "schemes": "all",
              "sizes": [{"name": "tiny", "batch_size": 2, "length": 8, "set": {"model.d_model": 16}}]})";
  }
  const auto cases = posenc::plan_bench(file, {}, {}, 1, "cpu");
  std::vector<std::string> names;
  for (const auto& c : cases) names.push_back(c.scheme);
  EXPECT_EQ(names, posenc::scheme_names());
  std::filesystem::remove_all(dir);
}

}  // namespace POSENC_TEST_UNIT
