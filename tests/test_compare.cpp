// posenc compare: the grid file, run states on disk, the summary's arithmetic,
// the process pool, and the command end to end (crash, rerun, resume).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>

#include "cli_helpers.h"
#include "helpers.h"
#include "posenc/errors.h"
#include "posenc/environment.h"
#include "posenc/experiments/compare_plan.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/experiments/summary.h"
#include "posenc/train/run_dir.h"
#include "posenc/train/trainer.h"
#include "posenc/util/dir_lock.h"
#include "posenc/util/io.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

namespace fs = std::filesystem;
using posenc::ComparePlan;
using posenc::ConfigError;
using posenc::json;

namespace {

/// A scratch directory removed at the end of the test.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name)
      : dir(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& file, const json& j) const {
    const auto p = dir / file;
    std::ofstream(p) << j.dump(2);
    return p.string();
  }
};

std::string base_config() { return std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json"; }

using posenc::testing::error_of;
using posenc::testing::tiny_grid;

/// An addition run's results.json (exact match, trained to 10 digits): its
/// validation score and (length, exact match) at each evaluated length.
json addition_result(int64_t seed, double val, const std::vector<std::pair<int64_t, double>>& scores) {
  json lengths = json::array();
  for (const auto& [length, score] : scores)
    lengths.push_back({{"length", length},
                       {"n", 100},
                       {"correct", std::lround(score * 100)},
                       {"exact_match", score},
                       {"beyond_training", length > 10},
                       {"by_kind", json::object()}});
  return json{{"task", "addition"},      {"metric", "exact_match"}, {"scheme", "kerple"},
              {"qkv", "projected"},      {"pooling", "max"},        {"seed", seed},
              {"parameters", 100},       {"train_seconds", 1.0},    {"val_accuracy", val},
              {"final_train_loss", 0.1}, {"lengths", lengths}};
}

}  // namespace

TEST(ComparePlan, ExpandsTheGridAndSkipsWhatTheModelCannotBuild) {
  Scratch s("posenc_plan");
  json grid = tiny_grid();
  grid["schemes"] = {
      "rope",
      "sinusoidal",
      {{"name", "alibi-dir"}, {"set", {{"model.positional.type", "alibi"}, {"model.positional.directional", true}}}}};
  grid["qkv"] = {"projected", "embedded"};
  grid["seeds"] = {0, 1};
  const ComparePlan plan = posenc::plan_comparison(s.write("grid.json", grid), (s.dir / "out").string(), false, 1);
  ASSERT_EQ(plan.runs.size(), 12u);
  EXPECT_EQ(plan.schemes, (std::vector<std::string>{"rope", "sinusoidal", "alibi-dir"}));
  std::set<std::string> skipped;
  for (const auto& r : plan.runs) {
    EXPECT_EQ(r.id, r.scheme + "-" + r.qkv + "-max-s" + std::to_string(r.seed));
    EXPECT_EQ(r.config.train.steps, 20);
    EXPECT_EQ(r.config.train.seed, r.seed);
    EXPECT_EQ(posenc::name_of(r.config.model.qkv), r.qkv);
    EXPECT_EQ(r.config.train.out_dir, (s.dir / "out" / "runs" / r.id).string());
    if (!r.skipped.empty()) skipped.insert(r.id);
  }
  EXPECT_EQ(skipped, (std::set<std::string>{"sinusoidal-embedded-max-s0", "sinusoidal-embedded-max-s1"}));
  EXPECT_NE(plan.runs[6].skipped.find("qkv=embedded"), std::string::npos) << plan.runs[6].skipped;
  const auto& alibi = plan.runs.back();
  EXPECT_EQ(alibi.config.model.positional.type, "alibi");
  EXPECT_EQ(alibi.config.model.positional.options.at("directional"), true);
}

TEST(ComparePlan, FullBlockReplacesTheAxes) {
  Scratch s("posenc_plan_full");
  json grid = tiny_grid();
  const std::string plain = s.write("plain.json", grid);
  EXPECT_NE(error_of([&] { posenc::plan_comparison(plain, "out", true, 1); }).find("has none"), std::string::npos);
  grid["full"] = {{"seeds", {0, 1, 2}}, {"pooling", {"max", "cls"}}, {"set", {{"train.steps", 30}}}};
  const auto plan = posenc::plan_comparison(s.write("full.json", grid), "out", true, 1);
  EXPECT_EQ(plan.runs.size(), 2u * 2u * 3u);
  EXPECT_EQ(plan.runs[0].config.train.steps, 30);
  EXPECT_EQ(posenc::plan_comparison(s.write("full2.json", grid), "out", false, 1).runs.size(), 2u);
}

TEST(ComparePlan, ADecoderTaskGetsOneRunWhateverThePoolingAxis) {
  // A decoder pools nothing: a pooling axis must not train copies of it that
  // differ only in a name, nor fail on a pooling a decoder refuses.
  Scratch s("posenc_plan_decoder");
  json grid = tiny_grid();
  grid["tasks"] = {"ordering", "copy"};
  grid["pooling"] = {"max", "cls"};
  const ComparePlan plan = posenc::plan_comparison(s.write("grid.json", grid), (s.dir / "out").string(), false, 1);
  std::vector<std::string> ids;
  for (const auto& r : plan.runs) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"ordering-none-projected-max-s0", "ordering-none-projected-cls-s0",
                                           "ordering-rope-projected-max-s0", "ordering-rope-projected-cls-s0",
                                           "copy-none-projected-max-s0", "copy-rope-projected-max-s0"}));
  EXPECT_EQ(plan.runs.back().config.model.kind, posenc::ModelKind::Decoder);
  EXPECT_EQ(plan.runs[1].config.model.pooling, posenc::Pooling::Cls);
  // Outside a grid, a decoder config that asks for a pooling is refused.
  json copy = posenc::read_json_file(std::string(POSENC_SOURCE_DIR) + "/configs/copy.json");
  copy["model"]["pooling"] = "cls";
  EXPECT_NE(error_of([&] {
              posenc::config_from_json(copy);
            }).find("model.kind=decoder predicts a token at every target position"),
            std::string::npos);
  copy["model"]["pooling"] = "max";  // what posenc wrote into decoder configs before: still read
  EXPECT_EQ(posenc::config_from_json(copy).model.kind, posenc::ModelKind::Decoder);
}

TEST(CompareSummary, ExactMatchHasChanceZeroAndPerplexityIsShown) {
  const auto result = [](const std::string& metric, double val, double at32, double ppl32) {
    json l8 = {{"length", 8},
               {"n", 100},
               {"correct", 95},
               {"accuracy", 0.95},
               {"beyond_training", false},
               {"by_kind", json::object()}};
    json l32 = {{"length", 32},
                {"n", 100},
                {"correct", 40},
                {"accuracy", at32},
                {"beyond_training", true},
                {"by_kind", json::object()}};
    if (metric == "perplexity") {
      l8["perplexity"] = 3.0;
      l32["perplexity"] = ppl32;
    }
    return json{{"task", metric == "perplexity" ? "charlm" : "copy"},
                {"metric", metric},
                {"scheme", "rope"},
                {"qkv", "projected"},
                {"pooling", "max"},
                {"seed", 0},
                {"parameters", 100},
                {"train_seconds", 1.0},
                {"val_accuracy", val},
                {"final_train_loss", 0.1},
                {"lengths", {l8, l32}}};
  };
  // Exact match: chance is 0, so 0.40 keeps 0.40/0.95 < 90% of the margin while 0.9 would keep it.
  const auto copy = posenc::summarize_variant({result("exact_match", 0.95, 0.40, 0)}, {"a"});
  EXPECT_EQ(copy.task, "copy");
  EXPECT_EQ(copy.extrapolation, 8);
  EXPECT_EQ(posenc::summarize_variant({result("exact_match", 0.95, 0.90, 0)}, {"a"}).extrapolation, 32);
  // results.json holds the score under the metric's key; the runs above were
  // written before it did (the score as "accuracy"), and both read alike.
  auto keyed = result("exact_match", 0.95, 0.90, 0);
  for (auto& l : keyed["lengths"]) {
    l["exact_match"] = l["accuracy"];
    l.erase("accuracy");
  }
  const auto keyed_copy = posenc::summarize_variant({keyed}, {"a"});
  EXPECT_EQ(keyed_copy.extrapolation, 32);
  EXPECT_DOUBLE_EQ(keyed_copy.lengths[1].accuracy.mean, 0.90);
  // With chance 0.5, 0.90 would fail: 0.5 + 0.9 * 0.45 = 0.905.
  auto ordering = result("exact_match", 0.95, 0.90, 0);
  ordering.erase("metric");
  EXPECT_EQ(posenc::summarize_variant({ordering}, {"a"}).extrapolation, 8);

  auto lm = posenc::summarize_variant({result("perplexity", 0.6, 0.55, 4.25)}, {"b"});
  EXPECT_DOUBLE_EQ(lm.lengths[1].perplexity.mean, 4.25);
  posenc::ComparisonSummary s;
  s.train_min_length = 4;
  s.train_max_length = 16;
  s.eval_lengths = {8, 32};
  s.tasks = {"charlm"};
  lm.variant = "charlm-rope";
  s.variants = {lm};
  const std::string md = posenc::summary_to_markdown(s);
  EXPECT_NE(md.find("| charlm-rope | perplexity |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 3.000 | 4.250 |"), std::string::npos) << md;
}

TEST(ComparePlan, TasksAxisPrefixesRunsAndSetsTheModelKind) {
  Scratch s("posenc_plan_tasks");
  json grid = tiny_grid();
  grid["base"] = std::string(POSENC_SOURCE_DIR) + "/configs/copy.json";
  grid["tasks"] = {"copy", {{"name", "sort-v8"}, {"set", {{"task.type", "sort"}, {"task.vocab_size", 8}}}}};
  const auto plan = posenc::plan_comparison(s.write("tasks.json", grid), "out", false, 1);
  ASSERT_EQ(plan.runs.size(), 4u);  // 2 tasks x 2 schemes, task-major
  EXPECT_EQ(plan.tasks, (std::vector<std::string>{"copy", "sort-v8"}));
  EXPECT_EQ(plan.schemes, (std::vector<std::string>{"none", "rope"}));
  EXPECT_EQ(plan.runs[0].id, "copy-none-projected-max-s0");
  EXPECT_EQ(plan.runs[3].id, "sort-v8-rope-projected-max-s0");
  EXPECT_EQ(plan.runs[3].config.task.type, "sort");
  EXPECT_EQ(task_vocab_size(plan.runs[3].config.task), 8);
  for (const auto& r : plan.runs) EXPECT_EQ(r.config.model.kind, posenc::ModelKind::Decoder);
  grid["tasks"] = {"copy", "parity"};
  EXPECT_NE(error_of([&] { posenc::plan_comparison(s.write("bad.json", grid), "out", false, 1); }).find("tasks[1]"),
            std::string::npos);
  // A task whose model kind differs from the base's keys: ordering takes no decoder.
  grid["tasks"] = {{{"name", "ord"}, {"set", {{"task.type", "ordering"}}}}};
  const std::string e = error_of([&] { posenc::plan_comparison(s.write("bad2.json", grid), "out", false, 1); });
  EXPECT_NE(e.find("model.kind=decoder"), std::string::npos) << e;
}

TEST(ComparePlan, BadGridsNameTheEntry) {
  Scratch s("posenc_plan_bad");
  const auto err = [&](const std::function<void(json&)>& edit) {
    json g = tiny_grid();
    edit(g);
    const std::string path = s.write("g.json", g);
    return error_of([&] { posenc::plan_comparison(path, "out", false, 1); });
  };
  EXPECT_NE(err([](json& g) { g["schemes"] = {"rope", "fancy"}; }).find("schemes[1] \"fancy\""), std::string::npos);
  EXPECT_NE(err([](json& g) {
              g["schemes"] = {"rope", "fancy"};
            }).find("unknown positional scheme"),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["schemes"] = {"rope", "rope"}; }).find("appears twice"), std::string::npos);
  // A row train would refuse before its first step fails the plan, naming the row,
  // instead of failing when its turn comes after the others trained.
  const std::string short_table = err([](json& g) {
    g["schemes"] = {
        "rope",
        {{"name", "short"}, {"set", {{"model.positional.type", "learned"}, {"model.positional.max_positions", 10}}}}};
  });
  EXPECT_NE(short_table.find("\"short\""), std::string::npos) << short_table;
  EXPECT_NE(short_table.find("model.positional.max_positions"), std::string::npos) << short_table;
  // A training config given to compare is named as one, not as a grid with unknown keys.
  const std::string training = std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json";
  const std::string e = error_of([&] { posenc::plan_comparison(training, "out", false, 1); });
  EXPECT_NE(e.find("is a training config (it has model/task/train sections), not a comparison grid"), std::string::npos)
      << e;
  EXPECT_NE(err([](json& g) {
              g["schemes"] = {{{"name", "a/b"}, {"set", json::object()}}};
            }).find("must be letters"),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["schemes"] = json::array(); }).find(".schemes: expected a non-empty array"),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["sedes"] = {1}; }).find(".sedes: unknown key"), std::string::npos);
  // The axes take the values of the config keys they set, and say which entry is wrong.
  EXPECT_NE(err([](json& g) { g["seeds"] = {0, 0}; }).find("g.json.seeds[1]: 0 appears twice"), std::string::npos);
  EXPECT_NE(err([](json& g) { g["seeds"] = {-1}; }).find("g.json.seeds[0]: -1 is out of range [0, "),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["seeds"] = json::array(); })
                .find("g.json.seeds: expected a non-empty array of "
                      "train.seed values (an integer each)"),
            std::string::npos);
  EXPECT_NE(err([](json& g) {
              g["qkv"] = {"projected", "fused"};
            }).find("g.json.qkv[1]: \"fused\" is not one of projected, embedded"),
            std::string::npos);
  EXPECT_NE(err([](json& g) {
              g["pooling"] = {"max", 3};
            }).find("g.json.pooling[1]: expected a string, got 3"),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["pooling"] = {"maxx"}; }).find("g.json.pooling[0]: \"maxx\" is not one of max,"),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["base"] = "/no/such/base.json"; }).find("cannot read /no/such/base.json: No such file"),
            std::string::npos);
  // Each top-level key is checked for the shape its declaration gives (grid_file_keys()), and named.
  EXPECT_NE(err([](json& g) { g.erase("base"); }).find("g.json.base: required (the path of a file"), std::string::npos);
  EXPECT_NE(err([](json& g) { g["base"] = ""; }).find("g.json.base: expected the path of a file"), std::string::npos);
  EXPECT_NE(err([](json& g) { g["description"] = 3; }).find("g.json.description: expected a string, got 3"),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["set"] = json::array(); }).find("g.json.set: expected an object of"),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["tasks"] = "copy"; }).find("g.json.tasks: expected a non-empty array of names"),
            std::string::npos);
  EXPECT_NE(err([](json& g) {
              g["schemes"] = {"rope", 7};
            }).find("g.json.schemes: expected a non-empty array"),
            std::string::npos);
  EXPECT_NE(err([](json& g) { g["full"] = {1}; }).find("g.json.full: expected an object, got [1]"), std::string::npos);
  // The "slurm" block is checked on every pass, not only when --slurm needs it.
  EXPECT_NE(err([](json& g) {
              g["slurm"] = {{"partiton", "gpu"}};
            }).find("g.json.slurm.partiton: unknown key"),
            std::string::npos);
  // The "full" block holds only the keys declared for it, checked as the top-level ones are.
  const auto full_err = [&](const json& full) {
    json g = tiny_grid();
    g["full"] = full;
    const std::string path = s.write("g.json", g);
    return error_of([&] { posenc::plan_comparison(path, "out", true, 1); });
  };
  EXPECT_NE(full_err({{"schemes", {"rope"}}}).find("g.json.full.schemes: unknown key"), std::string::npos);
  // ... and is checked without --full too: a slip in it is found before the long run needs it.
  EXPECT_NE(err([](json& g) {
              g["full"] = {{"sedes", {0, 1}}};
            }).find("g.json.full.sedes: unknown key"),
            std::string::npos);
  EXPECT_NE(full_err({{"seeds", {1, 1}}}).find("g.json.full.seeds[1]: 1 appears twice"), std::string::npos);
  EXPECT_EQ(full_err({{"seeds", {1, 2}}}), "(no error)");
  EXPECT_NE(err([](json& g) { g["set"]["train.stepz"] = 5; }).find("stepz"), std::string::npos);
  EXPECT_NE(error_of([&] {
              posenc::plan_comparison((s.dir / "missing.json").string(), "out", false, 1);
            }).find("missing.json: No such file"),
            std::string::npos);
}

TEST(ComparePlan, RunStateFollowsTheDiskAndRefusesAForeignRun) {
  Scratch s("posenc_state");
  const auto plan = posenc::plan_comparison(s.write("g.json", tiny_grid()), (s.dir / "out").string(), false, 1);
  const auto& run = plan.runs[0];
  EXPECT_EQ(posenc::run_state(plan, run), posenc::RunState::Fresh);

  // Killed after its first checkpoint: resumable.
  posenc::TrainRequest stop;
  stop.stop_at_step = 10;
  posenc::train(run.config, stop);
  EXPECT_EQ(posenc::run_state(plan, run), posenc::RunState::Resumable);
  posenc::TrainRequest resume;
  resume.resume = true;
  posenc::train(run.config, resume);
  EXPECT_EQ(posenc::run_state(plan, run), posenc::RunState::Finished);

  // Another thread count is the same run; another model is not, and is left alone.
  auto other_threads = plan;
  other_threads.runs[0].config.train.threads = 2;
  EXPECT_EQ(posenc::run_state(other_threads, other_threads.runs[0]), posenc::RunState::Finished);
  // More steps or another evaluation continue the finished run from its checkpoint (--resume takes them).
  for (const auto& [what, change] : std::vector<std::pair<std::string, std::function<void(posenc::Config&)>>>{
           {"steps", [](posenc::Config& c) { c.train.steps += 10; }},
           {"eval", [](posenc::Config& c) { c.eval.samples_per_length += 1; }}}) {
    auto longer = plan;
    change(longer.runs[0].config);
    EXPECT_EQ(posenc::run_state(longer, longer.runs[0]), posenc::RunState::Resumable) << what;
  }
  auto other_model = plan;
  other_model.runs[0].config.model.d_ff = 128;
  const std::string e = error_of([&] { posenc::run_state(other_model, other_model.runs[0]); });
  EXPECT_NE(e.find("different config (first difference at /model/d_ff)"), std::string::npos) << e;
  EXPECT_TRUE(fs::exists(fs::path(plan.run_dir(run)) / "results.json"));
}

TEST(CompareSummary, ExtrapolationRule) {
  using posenc::extrapolation_length;
  EXPECT_EQ(extrapolation_length(0.55, {{8, 0.9}}), posenc::kNotLearned);
  // val 0.9: floor = 0.5 + 0.9 * 0.4 = 0.86.
  EXPECT_EQ(extrapolation_length(0.9, {{8, 0.95}, {16, 0.9}, {32, 0.87}, {64, 0.7}, {128, 0.95}}), 32);
  EXPECT_EQ(extrapolation_length(0.9, {{16, 0.9}, {8, 0.95}}), 16);  // order does not matter
  EXPECT_EQ(extrapolation_length(1.0, {{8, 0.94}}), 0);
}

TEST(CompareSummary, BleuIsAveragedOverSeedsAndShownOnlyForTasksThatHaveIt) {
  const auto result = [](int64_t seed, double within, double beyond, double at8, double at32) {
    json l8 = {{"length", 8},
               {"n", 10},
               {"correct", 9},
               {"accuracy", 0.9},
               {"beyond_training", false},
               {"by_kind", json::object()},
               {"bleu", at8}};
    json l32 = {{"length", 32},
                {"n", 10},
                {"correct", 2},
                {"accuracy", 0.2},
                {"beyond_training", true},
                {"by_kind", json::object()},
                {"bleu", at32}};
    return json{
        {"task", "translation"}, {"metric", "exact_match"},
        {"scheme", "rope"},      {"qkv", "projected"},
        {"pooling", "max"},      {"seed", seed},
        {"parameters", 100},     {"train_seconds", 1.0},
        {"val_accuracy", 0.9},   {"final_train_loss", 0.1},
        {"lengths", {l8, l32}},  {"bleu", {{"all", 0.0}, {"within_training", within}, {"beyond_training", beyond}}}};
  };
  auto v = posenc::summarize_variant({result(0, 90, 40, 91, 41), result(1, 80, 60, 81, 61)}, {"a", "b"});
  ASSERT_TRUE(v.has_bleu());
  EXPECT_DOUBLE_EQ(v.bleu_within.mean, 85);
  EXPECT_DOUBLE_EQ(v.bleu_beyond.mean, 50);
  EXPECT_NEAR(v.bleu_beyond.std, 14.1421356, tolerance::kFloat32Value);  // sample std of {40, 60}
  EXPECT_DOUBLE_EQ(v.lengths[1].bleu.mean, 51);

  // A run without BLEU (SCAN, copy) has none, and a grid of such runs shows no BLEU column.
  json plain = result(0, 0, 0, 0, 0);
  plain.erase("bleu");
  for (auto& l : plain["lengths"]) l.erase("bleu");
  auto copy = posenc::summarize_variant({plain}, {"c"});
  EXPECT_FALSE(copy.has_bleu());
  EXPECT_EQ(copy.lengths[0].bleu.n, 0);

  posenc::ComparisonSummary s;
  s.train_min_length = 2;
  s.train_max_length = 20;
  s.eval_lengths = {8, 32};
  s.tasks = {"translation", "copy"};
  v.variant = "translation-rope";
  copy.variant = "copy-rope";
  copy.task = "copy";
  s.variants = {copy};
  EXPECT_EQ(posenc::summary_to_markdown(s).find("BLEU"), std::string::npos);
  s.variants = {v, copy};
  const std::string md = posenc::summary_to_markdown(s);
  EXPECT_NE(md.find("| BLEU within | BLEU beyond |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 85.0 ± 7.1 | 50.0 ± 14.1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 0.200 | 8 | 8 (1) | - | - |"), std::string::npos) << md;  // the copy row: no BLEU
  const json j = posenc::summary_to_json(s);
  EXPECT_DOUBLE_EQ(j["variants"][0]["bleu"]["beyond_training"]["mean"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(j["variants"][0]["lengths"][1]["bleu"]["mean"].get<double>(), 51);
  EXPECT_FALSE(j["variants"][1].contains("bleu"));
  const std::string csv = posenc::summary_to_csv(s);
  EXPECT_NE(csv.find(",translation,exact_match,85.00,50.00,8;8\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",copy,exact_match,,,8\n"), std::string::npos) << csv;
}

TEST(CompareSummary, MeanStdPooledIntervalAndRendering) {
  const auto result = [](int64_t seed, double val, int64_t c8, int64_t c32) {
    return json{{"scheme", "rope"},
                {"qkv", "projected"},
                {"pooling", "max"},
                {"seed", seed},
                {"parameters", 100},
                {"train_seconds", 10.0 + seed},
                {"val_accuracy", val},
                {"final_train_loss", 0.1},
                {"lengths",
                 {{{"length", 8},
                   {"n", 100},
                   {"correct", c8},
                   {"accuracy", c8 / 100.0},
                   {"beyond_training", false},
                   {"by_kind", {{"sorted", {{"accuracy", 1.0}}}}}},
                  {{"length", 32},
                   {"n", 100},
                   {"correct", c32},
                   {"accuracy", c32 / 100.0},
                   {"beyond_training", true},
                   {"by_kind", {{"sorted", {{"accuracy", 0.5}}}}}}}}};
  };
  auto v = posenc::summarize_variant({result(0, 1.0, 100, 60), result(1, 0.98, 98, 80)}, {"a", "b"});
  EXPECT_DOUBLE_EQ(v.val_accuracy.mean, 0.99);
  EXPECT_NEAR(v.val_accuracy.std, 0.0141421356, tolerance::kFloat64);  // sample std of {1.0, 0.98}
  EXPECT_DOUBLE_EQ(v.train_seconds.mean, 10.5);
  ASSERT_EQ(v.lengths.size(), 2u);
  EXPECT_EQ(v.lengths[1].correct, 140);
  EXPECT_EQ(v.lengths[1].total, 200);
  EXPECT_LT(v.lengths[1].ci_lo, 0.7);
  EXPECT_GT(v.lengths[1].ci_hi, 0.7);
  EXPECT_DOUBLE_EQ(v.beyond_mean, 0.7);
  EXPECT_EQ(v.extrapolation, 8);  // 0.7 < 0.5 + 0.9 * 0.49
  EXPECT_DOUBLE_EQ(v.lengths[1].by_kind.at("sorted").mean, 0.5);

  posenc::ComparisonSummary s;
  s.train_min_length = 4;
  s.train_max_length = 16;
  s.eval_lengths = {8, 32};
  v.variant = "rope-projected-max";
  s.variants = {v};
  s.skipped = {{"sinusoidal-embedded-max", "no residual stream"}};
  const std::string md = posenc::summary_to_markdown(s);
  EXPECT_NE(
      md.find("| rope-projected-max | 2 | 100 | 10 | 0.990 ± 0.014 | 0.990 ± 0.014 | 0.700 ± 0.141 | 0.700 | 8 |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("len 32*"), std::string::npos);
  EXPECT_NE(md.find("- sinusoidal-embedded-max: no residual stream"), std::string::npos);
  const std::string csv = posenc::summary_to_csv(s);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 2);
  EXPECT_NE(csv.find("len32_mean,len32_std,len32_ci_lo,len32_ci_hi"), std::string::npos);
  EXPECT_NE(posenc::summary_to_text(s).find("rope-projected-max"), std::string::npos);
  EXPECT_EQ(posenc::summary_to_json(s)["variants"][0]["extrapolation"], 8);
}

// A row's mean can extrapolate while some seeds fail: "per seed" applies the
// same rule to each run alone, so a grid says how many seeds get how far.
TEST(CompareSummary, PerSeedExtrapolationAppliesTheRuleToEachRunAlone) {
  const auto result = [](int64_t seed, double val, double at16, double at32) {
    return addition_result(seed, val, {{8, val}, {16, at16}, {32, at32}});
  };
  // Seeds 0 and 3 hold to 32, seed 1 to 16, seed 2 only in training, seed 4 never learned it.
  // The mean curve (0.69 at 16 against 0.9 in-distribution, below 0.81) stops at 8.
  auto v = posenc::summarize_variant({result(0, 1.0, 1.0, 0.95), result(1, 1.0, 0.95, 0.5), result(2, 1.0, 0.5, 0.2),
                                      result(3, 1.0, 1.0, 1.0), result(4, 0.5, 0.0, 0.0)},
                                     {"s0", "s1", "s2", "s3", "s4"});
  EXPECT_EQ(v.extrapolation, 8);
  EXPECT_EQ(v.extrapolation_by_seed, (std::vector<int64_t>{32, 16, 8, 32, posenc::kNotLearned}));

  posenc::ComparisonSummary s;
  s.train_min_length = 2;
  s.train_max_length = 10;
  s.eval_lengths = {8, 16, 32};
  s.tasks = {"addition"};
  v.variant = "addition-kerple";
  s.variants = {v};
  const std::string md = posenc::summary_to_markdown(s);
  EXPECT_NE(md.find("| extrapolates to | per seed |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 8 | 32 (2), 16 (1), 8 (1), not learned (1) |"), std::string::npos) << md;
  EXPECT_NE(md.find("\"per seed\": the same rule on each seed's run alone"), std::string::npos) << md;
  const json j = posenc::summary_to_json(s);
  EXPECT_EQ(j["variants"][0]["extrapolation_by_seed"], json({32, 16, 8, 32, "not learned"}));
  EXPECT_NE(posenc::summary_to_csv(s).find(",32;16;8;32;not learned\n"), std::string::npos);

  // One seed per row: the column would repeat "extrapolates to", and is left out.
  s.variants = {posenc::summarize_variant({result(0, 1.0, 1.0, 0.95)}, {"s0"})};
  s.variants[0].variant = "addition-kerple";
  EXPECT_EQ(posenc::summary_to_markdown(s).find("per seed"), std::string::npos);
}

// Values worked out by hand: the splits of the pooled scores are few enough to list.
TEST(PermutationTest, CountsEverySplitAsFarFromEqualAsTheObservedOne) {
  using posenc::permutation_test;
  // {1,2,3} against {4,5,6}: of the C(6,3) = 20 splits only these two and their
  // mirror image are 3 apart, so p = 2/20; no split of 3 against 3 does better.
  auto t = permutation_test({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(t.exact);
  EXPECT_DOUBLE_EQ(t.difference, -3.0);
  EXPECT_DOUBLE_EQ(t.splits, 20.0);
  EXPECT_DOUBLE_EQ(t.p, 0.1);
  EXPECT_DOUBLE_EQ(t.min_p, 0.1);
  // {1,2,4} against {3,5,6}: a's sum 7; the sums of 3 of 1..6 at most 7 ({1,2,3},
  // {1,2,4}) or at least 14 (their complements): 4 of 20.
  EXPECT_DOUBLE_EQ(permutation_test({1, 2, 4}, {3, 5, 6}).p, 0.2);
  // One against three: 10 beside {0,1,2} is 9 above their mean; taking 0, 1 or
  // 2 alone instead gives 13/3, 3 and 5/3. Unequal groups have no mirror: p = 1/4.
  t = permutation_test({10}, {0, 1, 2});
  EXPECT_DOUBLE_EQ(t.p, 0.25);
  EXPECT_DOUBLE_EQ(t.min_p, 0.25);
  // Equal scores: every split is as far apart as the observed one.
  EXPECT_DOUBLE_EQ(permutation_test({1, 1, 1}, {1, 1, 1}).p, 1.0);
  // Ten seeds against ten, wholly apart: 2 of C(20,10) = 184,756.
  EXPECT_DOUBLE_EQ(permutation_test(std::vector<double>(10, 1.0), std::vector<double>(10, 0.0)).p, 2.0 / 184756);
  // A NaN score (a length whose outputs were all non-finite) cannot be tested.
  EXPECT_TRUE(std::isnan(permutation_test({1, std::nan(""), 3}, {4, 5, 6}).p));
  EXPECT_TRUE(std::isnan(permutation_test({}, {4, 5, 6}).p));
}

// Scores such as 0.1 + 0.2 + 0.3 summed in another order differ in the last
// bit; the mirror split, as far apart as the observed one, must still count.
TEST(PermutationTest, RoundingDoesNotLoseASplitAsFarApartAsTheObservedOne) {
  EXPECT_DOUBLE_EQ(posenc::permutation_test({0.1, 0.2, 0.3}, {0.4, 0.5, 0.6}).p, 0.1);
  EXPECT_DOUBLE_EQ(posenc::permutation_test({0.7, 0.1, 0.2}, {0.3, 0.6, 0.5}).p,
                   posenc::permutation_test({7, 1, 2}, {3, 6, 5}).p);
  // Exact match on 300 examples: in exact arithmetic 18 of the 20 splits are at
  // least 0.1 apart (checked with rational numbers); summed in float64, one of
  // them falls a last bit short of the observed difference.
  EXPECT_DOUBLE_EQ(posenc::permutation_test({0.97, 0.106667, 0.433333}, {0.2, 0.843333, 0.766667}).p, 0.9);
}

// Past the exact limit, random splits estimate the same p: with 200,000 draws
// its standard error is at most sqrt(0.25 / 200,000) = 0.0011, so 0.006 is
// over five of them.
TEST(PermutationTest, RandomSplitsEstimateTheExactP) {
  const std::vector<double> a = {0.9, 0.85, 0.95, 0.7, 0.92, 0.88, 0.8, 0.99};
  const std::vector<double> b = {0.8, 0.75, 0.9, 0.6, 0.85, 0.7, 0.82, 0.78};
  const auto exact = posenc::permutation_test(a, b);
  const auto estimated = posenc::permutation_test(a, b, /*max_exact=*/0);
  EXPECT_TRUE(exact.exact);
  EXPECT_FALSE(estimated.exact);
  EXPECT_GT(exact.p, 0.01);  // a p in the middle, where an estimate can err either way
  EXPECT_LT(exact.p, 0.2);
  EXPECT_NEAR(estimated.p, exact.p, 0.006);
}

// The summary tests each row of three seeds or more against its task's top
// row, length by length, and says how small a p so few seeds can give.
TEST(CompareSummary, TestsEachRowAgainstTheTopRowOverSeeds) {
  const auto result = [](int64_t seed, double at16) { return addition_result(seed, 1.0, {{8, 1.0}, {16, at16}}); };
  posenc::ComparisonSummary s;
  s.train_min_length = 2;
  s.train_max_length = 10;
  s.eval_lengths = {8, 16};
  s.variants = {posenc::summarize_variant({result(0, 1.0), result(1, 0.9), result(2, 0.95)}, {"a0", "a1", "a2"}),
                posenc::summarize_variant({result(0, 0.2), result(1, 0.3), result(2, 0.1)}, {"b0", "b1", "b2"}),
                posenc::summarize_variant({result(0, 0.5), result(1, 0.4)}, {"c0", "c1"})};
  s.variants[0].variant = "top";
  s.variants[1].variant = "three-seeds";
  s.variants[2].variant = "two-seeds";
  EXPECT_EQ(s.variants[1].lengths[1].by_seed, (std::vector<double>{0.2, 0.3, 0.1}));

  const auto tests = posenc::seed_tests(s);
  ASSERT_EQ(tests.size(), 2u);  // three-seeds at 8 and 16; two seeds are too few
  EXPECT_EQ(tests[1].variant, 1u);
  EXPECT_EQ(tests[1].top, 0u);
  EXPECT_EQ(tests[1].length, 16);
  EXPECT_NEAR(tests[1].test.difference, -0.75, 1e-12);
  EXPECT_DOUBLE_EQ(tests[1].test.p, 0.1);
  EXPECT_DOUBLE_EQ(tests[0].test.p, 1.0);  // equal at 8

  const std::string md = posenc::summary_to_markdown(s);
  EXPECT_NE(md.find("| three-seeds | top | +0.000 (p 1) | -0.750 (p 0.1) |"), std::string::npos) << md;
  EXPECT_NE(md.find("the smallest possible is 3 seeds against 3: 0.1"), std::string::npos) << md;
  EXPECT_EQ(md.find("| two-seeds | top |"), std::string::npos) << md;
  const json j = posenc::summary_to_json(s);
  EXPECT_EQ(j["variants"][1]["lengths"][1]["against_top"]["variant"], "top");
  EXPECT_DOUBLE_EQ(j["variants"][1]["lengths"][1]["against_top"]["p"].get<double>(), 0.1);
  EXPECT_FALSE(j["variants"][0]["lengths"][1].contains("against_top"));
  EXPECT_EQ(j["variants"][2]["lengths"][1]["by_seed"], json({0.5, 0.4}));

  // A top row of fewer seeds (one long run, say) is passed over: the rows are
  // tested against the first row that has three.
  s.variants.insert(s.variants.begin(), s.variants[2]);
  s.variants[0].variant = "two-seeds-on-top";
  ASSERT_EQ(posenc::seed_tests(s).size(), 2u);
  EXPECT_EQ(posenc::seed_tests(s)[0].top, 1u);
  EXPECT_EQ(posenc::seed_tests(s)[0].variant, 2u);

  // One row of three seeds: nothing to test it against, and nothing said.
  s.variants.erase(s.variants.begin(), s.variants.begin() + 2);
  EXPECT_TRUE(posenc::seed_tests(s).empty());
  EXPECT_EQ(posenc::summary_to_markdown(s).find("permutation test"), std::string::npos);
}

TEST(CompareSummary, NamesTheEnvironmentsItsRunsCameFrom) {
  posenc::ComparisonSummary s;
  s.train_min_length = 4;
  s.train_max_length = 16;
  const json here = {{"posenc", "0123456789ab"},  {"device", "cpu"},
                     {"libtorch", "2.6.0"},       {"blas", "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3"},
                     {"blas_kernels", "Haswell"}, {"OPENBLAS_CORETYPE", "Haswell"}};
  s.environments = {{here, {"rope-projected-max-s0", "rope-projected-max-s1"}}};
  std::string md = posenc::summary_to_markdown(s);
  EXPECT_NE(md.find("Computed on: posenc 0123456789ab, cpu, LibTorch 2.6.0, BLAS "
                    "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 "
                    "(Haswell kernels), OPENBLAS_CORETYPE=Haswell (every run)."),
            std::string::npos)
      << md;
  EXPECT_EQ(posenc::summary_to_text(s).find("environments"), std::string::npos);

  // A grid resumed on another machine, beside runs from before the record.
  json there = here;
  there["blas_kernels"] = "SkylakeX";
  there.erase("OPENBLAS_CORETYPE");
  s.environments.push_back({there, {"rope-projected-max-s2"}});
  s.environments.push_back({nullptr, {"none-projected-max-s0"}});
  md = posenc::summary_to_markdown(s);
  EXPECT_NE(md.find("computed in 3 environments"), std::string::npos) << md;
  EXPECT_NE(md.find("(Haswell kernels), OPENBLAS_CORETYPE=Haswell (2 runs): rope-projected-max-s0, "
                    "rope-projected-max-s1\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("(SkylakeX kernels) (1 run): rope-projected-max-s2\n"), std::string::npos) << md;
  EXPECT_NE(md.find("- not recorded (1 run): none-projected-max-s0\n"), std::string::npos) << md;
  EXPECT_NE(posenc::summary_to_text(s).find("3 numeric environments"), std::string::npos);
  const json j = posenc::summary_to_json(s);
  ASSERT_EQ(j["environments"].size(), 3u);
  EXPECT_EQ(j["environments"][1]["environment"], there);
  EXPECT_TRUE(j["environments"][2]["environment"].is_null());
  EXPECT_EQ(j["environments"][0]["runs"].size(), 2u);
}

TEST(CompareSummary, TheProtocolNamesTheRowsThatTrainedLongerOrScoredAveragedWeights) {
  // Grid rows may override train.steps or train.average_from; the protocol line
  // must not claim every row trained as the first run did.
  const auto result = [](int64_t steps, json averaged) {
    json r = {{"scheme", "kerple"},      {"qkv", "projected"},   {"pooling", "max"},    {"seed", 0},
              {"parameters", 100},       {"train_seconds", 1.0}, {"val_accuracy", 1.0}, {"final_train_loss", 0.1},
              {"metric", "exact_match"}, {"task", "copy"},       {"steps", steps},      {"lengths", json::array()}};
    if (!averaged.is_null()) r["averaged_weights"] = averaged;
    return r;
  };
  posenc::ComparisonSummary s;
  s.steps = 3000;
  s.tasks = {"copy"};
  const auto row = [&](const std::string& name, const json& r) {
    auto v = posenc::summarize_variant({r}, {name + "-s0"});
    v.scheme = name;
    v.variant = "copy-" + name;
    return v;
  };
  s.variants = {row("plain", result(3000, nullptr))};
  EXPECT_NE(posenc::summary_to_markdown(s).find("Trained 3000 steps of batch"), std::string::npos);
  s.variants.push_back(row("long", result(9000, nullptr)));
  s.variants.push_back(row("long-avg", result(9000, {{"from_step", 5000}, {"checkpoints", 5}})));
  s.variants.push_back(row("avg", result(3000, {{"from_step", 1500}, {"checkpoints", 7}})));
  const std::string md = posenc::summary_to_markdown(s);
  EXPECT_NE(md.find("Trained 3000 steps (long: 9000 steps; long-avg: 9000 steps, scored with the mean weights from "
                    "step 5000 on; avg: scored with the mean weights from step 1500 on) of batch"),
            std::string::npos)
      << md;
  const json j = posenc::summary_to_json(s);
  EXPECT_EQ(j["variants"][1]["steps"], 9000);
  EXPECT_TRUE(j["variants"][1]["averaged_from"].is_null());
  EXPECT_EQ(j["variants"][2]["averaged_from"], 5000);
}

TEST(ProcessPool, RunsJobsInParallelAndReportsEachExit) {
  Scratch s("posenc_pool");
  const auto log = [&](const std::string& id) { return (s.dir / (id + ".log")).string(); };
  std::vector<posenc::Job> jobs = {
      {"fail", {"/bin/sh", "-c", "echo oops; exit 3"}, log("fail")},
      {"ok", {"/bin/sh", "-c", "echo hello"}, log("ok")},
      {"slow", {"/bin/sh", "-c", "sleep 0.3"}, log("slow")},
      {"missing", {"/no/such/program"}, log("missing")},
  };
  size_t most_running = 0;
  std::vector<std::string> done;
  const auto outcomes = posenc::run_pool(
      jobs, 2, [&](const posenc::PoolStatus& st) { most_running = std::max(most_running, st.running.size()); },
      [&](const posenc::JobOutcome& o) { done.push_back(o.id); }, 0.01);
  ASSERT_EQ(outcomes.size(), 4u);
  EXPECT_EQ(outcomes[0].exit_code, 3);
  EXPECT_EQ(outcomes[1].exit_code, 0);
  EXPECT_EQ(outcomes[2].exit_code, 0);
  EXPECT_EQ(outcomes[3].exit_code, 127);
  EXPECT_EQ(done.size(), 4u);
  EXPECT_LE(most_running, 2u);
  EXPECT_EQ(posenc::tail_lines(log("ok"), 5), "hello\n");
  EXPECT_EQ(posenc::tail_lines(log("fail"), 5), "oops\n");
  EXPECT_NE(posenc::tail_lines(log("missing"), 5).find("could not start"), std::string::npos);
}

TEST(CompareCli, CrashedRunIsReportedFinishedRunsAreKeptAndRerunsContinue) {
  // A run that fails when its turn comes, for a reason the plan cannot see:
  // its device (a CUDA run on a machine without one). What the plan can see
  // (a table shorter than a length) fails the plan itself (ComparePlan.BadGridsNameTheEntry).
  if (torch::cuda::is_available()) GTEST_SKIP() << "needs a machine without CUDA for its failing run";
  Scratch s("posenc_compare_cli");
  json grid = tiny_grid();
  grid["schemes"] = {"none", "rope", {{"name", "on-cuda"}, {"set", {{"train.device", "cuda"}}}}};
  const std::string file = s.write("grid.json", grid);
  const std::string out = (s.dir / "out").string();
  const std::string args = "compare " + file + " --out " + out + " --jobs 2 --no-figures --no-progress";

  const auto first = posenc::testing::run_cli(args);
  EXPECT_EQ(first.code, 1) << first.output;
  EXPECT_NE(first.output.find("on-cuda-projected-max-s0 FAILED"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("sees no CUDA device"), std::string::npos) << first.output;  // the log's tail
  for (const char* f : {"summary.json", "summary.csv", "summary.md", "report.md"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  const json summary = posenc::read_json_file(out + "/summary.json");
  EXPECT_EQ(summary["variants"].size(), 2u);
  EXPECT_EQ(summary["unfinished"], json({"on-cuda-projected-max-s0"}));
  // Both finished runs ran here: one environment, the one this process sees.
  ASSERT_EQ(summary["environments"].size(), 1u) << summary["environments"].dump();
  EXPECT_EQ(summary["environments"][0]["runs"], json({"none-projected-max-s0", "rope-projected-max-s0"}));
  EXPECT_EQ(summary["environments"][0]["environment"], posenc::numeric_environment("cpu"));
  const auto rope_results = fs::path(out) / "runs" / "rope-projected-max-s0" / "results.json";
  const auto written = fs::last_write_time(rope_results);
  EXPECT_TRUE(fs::exists(fs::path(out) / "inspect" / "rope-projected-max.json"));
  EXPECT_TRUE(fs::exists(fs::path(out) / "attention" / "rope-projected-max.json"));

  // Rerun: the two finished runs are skipped, the broken one is retried (and fails again, before
  // training: its device is resolved first).
  const auto second = posenc::testing::run_cli(args);
  EXPECT_EQ(second.code, 1);
  EXPECT_NE(second.output.find("2 finished already, 0 diverged already, 0 to resume, 1 to start"), std::string::npos)
      << second.output;
  EXPECT_EQ(fs::last_write_time(rope_results), written);

  // Without the broken scheme everything is finished and the exit status is 0.
  grid["schemes"] = {"none", "rope"};
  s.write("grid.json", grid);
  const auto third = posenc::testing::run_cli(args);
  EXPECT_EQ(third.code, 0) << third.output;
  EXPECT_NE(third.output.find("2 finished already, 0 diverged already, 0 to resume, 0 to start"), std::string::npos)
      << third.output;

  // A grid that changes the model of an existing run stops before touching anything.
  grid["set"]["model.d_ff"] = 128;
  s.write("grid.json", grid);
  const auto clash = posenc::testing::run_cli(args);
  EXPECT_EQ(clash.code, 2);
  EXPECT_NE(clash.output.find("different config (first difference at /model/d_ff)"), std::string::npos) << clash.output;
  EXPECT_EQ(fs::last_write_time(rope_results), written);
}

TEST(CompareCli, AttentionAndInspectReadACheckpoint) {
  Scratch s("posenc_attention_cli");
  const std::string run_dir = (s.dir / "run").string();
  const auto train = posenc::testing::run_cli(
      "train " + base_config() +
      " --set train.steps=10 --set train.val_samples=32 --set eval.lengths=[8] --set eval.samples_per_length=32 "
      "--set model.pooling=cls --no-progress --out " +
      run_dir);
  ASSERT_EQ(train.code, 0) << train.output;
  const std::string ckpt = run_dir + "/checkpoint.pt";
  const std::string json_path = (s.dir / "att.json").string();
  const auto att = posenc::testing::run_cli("attention " + ckpt + " --length 12 --kind reverse --json " + json_path);
  ASSERT_EQ(att.code, 0) << att.output;
  const json a = posenc::read_json_file(json_path);
  EXPECT_EQ(a["tokens"].size(), 12u);
  EXPECT_EQ(a["label"], 0);
  EXPECT_EQ(a["layers"].size(), 3u);         // blocks
  EXPECT_EQ(a["layers"][0].size(), 4u);      // heads
  EXPECT_EQ(a["layers"][0][0].size(), 13u);  // queries, CLS included
  for (const auto& row : a["layers"][2][3]) {
    double sum = 0;
    for (double p : row) sum += p;
    EXPECT_NEAR(sum, 1.0, tolerance::kFloat32Value);
  }
  const auto bad_kind = posenc::testing::run_cli("attention " + ckpt + " --kind upside_down");
  EXPECT_EQ(bad_kind.code, 2);
  EXPECT_NE(bad_kind.output.find("--kind upside_down: task ordering has the kinds sorted, shuffle"), std::string::npos)
      << bad_kind.output;
  const auto too_far = posenc::testing::run_cli("attention " + ckpt + " --index 100000");
  EXPECT_EQ(too_far.code, 2);
  EXPECT_NE(too_far.output.find("has only"), std::string::npos) << too_far.output;

  const auto inspect = posenc::testing::run_cli("inspect --checkpoint " + ckpt + " --length 20");
  ASSERT_EQ(inspect.code, 0) << inspect.output;
  const json i = json::parse(inspect.output);
  EXPECT_EQ(i["scheme"], "rope");
  EXPECT_EQ(i["rotated_ones"].size(), 20u);
  EXPECT_EQ(i["rotated_ones"][0].size(), 16u);  // one head of width 64 / 4
  const auto neither = posenc::testing::run_cli("inspect");
  EXPECT_EQ(neither.code, 2);
  EXPECT_NE(neither.output.find("either a scheme name or --checkpoint"), std::string::npos);
}

TEST(CompareCli, OneComparisonPerDirectoryAndAnInterruptStopsTheChildren) {
  Scratch s("posenc_compare_signal");
  json grid = tiny_grid();
  grid["set"]["train.steps"] = 3000;  // long enough to be interrupted
  grid["set"]["train.checkpoint_every"] = 50;
  grid["schemes"] = {"none"};
  const std::string file = s.write("grid.json", grid);
  const std::string out = (s.dir / "out").string();
  const std::string log = (s.dir / "first.log").string();

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execl(POSENC_BINARY, POSENC_BINARY, "compare", file.c_str(), "--out", out.c_str(), "--no-figures",
            "--no-progress", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until the child run has logged some steps.
  const fs::path metrics = fs::path(out) / "runs" / "none-projected-max-s0" / "metrics.jsonl";
  for (int i = 0; i < 600 && !(fs::exists(metrics) && fs::file_size(metrics) > 200); ++i) ::usleep(50'000);
  ASSERT_TRUE(fs::exists(metrics));

  const auto second = posenc::testing::run_cli("compare " + file + " --out " + out + " --no-figures --no-progress");
  EXPECT_EQ(second.code, 2);
  EXPECT_NE(second.output.find("another posenc compare is running on " + out), std::string::npos) << second.output;

  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143) << posenc::tail_lines(log, 10);  // 128 + SIGTERM
  // The child was stopped with it: its metrics no longer grow.
  const auto size = fs::file_size(metrics);
  ::usleep(1'500'000);
  EXPECT_EQ(fs::file_size(metrics), size);
  EXPECT_NE(posenc::tail_lines(log, 10).find("stopped by SIGTERM: finished runs are kept"), std::string::npos);
  // The child saved its step before leaving, and says how to go on.
  const std::string child_log = posenc::tail_lines(out + "/logs/none-projected-max-s0.log", 5);
  EXPECT_NE(child_log.find("stopped by SIGTERM at step"), std::string::npos) << child_log;
  EXPECT_TRUE(fs::exists(fs::path(out) / "runs" / "none-projected-max-s0" / "checkpoint.pt"));
}

// compare killed with SIGKILL (the kernel's out-of-memory killer, a scheduler
// past its grace time) cannot pass a stop on. Its run must not train on in OUT
// without the directory's lock, where a second compare would start it again:
// Linux sends it SIGTERM when compare dies (die_with_parent), and it stops as
// for any stop, with its checkpoint.
TEST(CompareCli, ARunStopsWithItsCheckpointWhenCompareIsKilled) {
  Scratch s("posenc_compare_killed");
  json grid = tiny_grid();
  grid["set"]["train.steps"] = 100000000;
  grid["set"]["train.checkpoint_every"] = 100000000;
  grid["schemes"] = {"none"};
  const std::string file = s.write("grid.json", grid), out = (s.dir / "out").string();
  const std::string log = (s.dir / "log").string(), run_log = out + "/logs/none-projected-max-s0.log";
  pid_t compare = posenc::testing::start_cli({"compare", file, "--out", out, "--no-figures", "--no-progress"}, log);
  // However the test ends (a failed ASSERT returns early), nothing it started trains on: a run of 1e8
  // steps left behind would take a core from every test after it. A pid is dropped once its process is
  // known to be gone, so that the guard never signals a pid the system may have given to another process.
  std::vector<pid_t> children;
  struct KillOnExit {
    pid_t& compare;
    std::vector<pid_t>& children;
    ~KillOnExit() {
      if (compare > 0) {
        ::kill(compare, SIGKILL);
        ::waitpid(compare, nullptr, 0);
      }
      for (const pid_t child : children) ::kill(child, SIGKILL);
    }
  } kill_on_exit{compare, children};
  ASSERT_TRUE(posenc::testing::wait_for(
      [&] { return fs::exists(run_log) && posenc::read_file(run_log).find("info step ") != std::string::npos; }, 300))
      << posenc::read_file(log);
  // The run: the one child of compare.
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;  // not a process
    if (posenc::testing::process_state_and_parent(std::stoi(name)).second == compare)
      children.push_back(std::stoi(name));
  }
  ASSERT_EQ(children.size(), 1u) << posenc::read_file(log);
  ::kill(compare, SIGKILL);
  ::waitpid(compare, nullptr, 0);
  compare = 0;
  const pid_t run = children[0];
  const bool ended = posenc::testing::wait_for([&] { return !posenc::testing::process_running(run); }, 60);
  if (ended) children.clear();
  EXPECT_TRUE(ended) << "the run (pid " << run << ") outlived compare";
  const std::string text = posenc::read_file(run_log);
  EXPECT_NE(text.find("stopped by SIGTERM at step"), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(fs::path(out) / "runs" / "none-projected-max-s0" / "checkpoint.pt")) << text;
}

// SIGTERM to compare alone (as `timeout` or a scheduler sends it) while the
// figure script draws: compare ends the script and stops, rather than dying
// and leaving the script writing into OUT. The script here never finishes.
TEST(CompareCli, SigtermWhileTheFigureScriptDrawsEndsTheScriptAndStops) {
  Scratch s("posenc_compare_figures_stop");
  const std::string fake = posenc::testing::stand_in_python(s.dir, false);
  json grid = tiny_grid();
  grid["schemes"] = {"none"};
  const std::string file = s.write("grid.json", grid), out = (s.dir / "out").string();
  const std::string log = (s.dir / "log").string();
  ::setenv("POSENC_PYTHON", fake.c_str(), 1);
  const pid_t pid = posenc::testing::start_cli({"compare", file, "--out", out, "--no-progress"}, log);
  ::unsetenv("POSENC_PYTHON");
  const int script = posenc::testing::stand_in_python_pid(s.dir, 300);
  ASSERT_GT(script, 0) << (fs::exists(log) ? posenc::read_file(log) : "no log");
  ::kill(pid, SIGTERM);
  const int code = posenc::testing::wait_exit_within(pid, 60);
  const bool script_lives = ::kill(script, 0) == 0;
  if (script_lives) ::kill(script, SIGKILL);
  const std::string text = posenc::read_file(log);
  EXPECT_EQ(code, 128 + SIGTERM) << text;
  EXPECT_FALSE(script_lives) << "the figure script (pid " << script << ") outlived compare:\n" << text;
  EXPECT_NE(text.find("stopped by SIGTERM while writing the outputs"), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(fs::path(out) / "summary.json"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "report.md"));
}

namespace {
/// The working directory is the repository root while it lives, as the docs run posenc
/// (a task.path such as configs/data/... is relative to it).
struct AtRepositoryRoot {
  fs::path before = fs::current_path();
  AtRepositoryRoot() { fs::current_path(POSENC_SOURCE_DIR); }
  ~AtRepositoryRoot() { fs::current_path(before); }
};

/// configs/*.json with the parsed JSON of each.
std::vector<std::pair<fs::path, json>> shipped_configs() {
  std::vector<std::pair<fs::path, json>> out;
  for (const auto& e : fs::directory_iterator(std::string(POSENC_SOURCE_DIR) + "/configs"))
    if (e.path().extension() == ".json") out.emplace_back(e.path(), posenc::read_json_file(e.path().string()));
  return out;
}
}  // namespace

TEST(ComparePlan, EveryShippedGridPlans) {
  // Each shipped grid (a "schemes" axis; a bench config has "sizes" too) expands into buildable
  // runs, default and --full.
  const AtRepositoryRoot at_root;
  int grids = 0;
  std::string unchecked;  // grids whose system corpus this machine lacks (scripts/setup.sh installs them)
  for (const auto& [path, j] : shipped_configs()) {
    if (!j.contains("schemes") || j.contains("sizes")) continue;
    const std::string name = path.filename().string();
    ++grids;
    const bool has_full = j.contains("full");
    for (const bool full : {false, true}) {
      if (full && !has_full) continue;
      ComparePlan plan;
      try {
        plan = posenc::plan_comparison(path.string(), "out", full, 1);
      } catch (const posenc::ConfigError& e) {
        const std::string what = e.what();
        if (what.find("does not exist (it comes with Debian's") != std::string::npos) {
          unchecked += " " + name + ": " + what.substr(what.find("task.path"));
          break;
        }
        ADD_FAILURE() << name << (full ? " --full" : "") << ": " << what;
        continue;
      }
      EXPECT_FALSE(plan.runs.empty()) << name;
    }
  }
  EXPECT_GE(grids, 3);
  if (!unchecked.empty()) GTEST_SKIP() << "every other grid planned; not checked here:" << unchecked;
}

TEST(ComparePlan, EveryShippedTrainingConfigLoadsAndBuildsItsTask) {
  // Each configs/*.json that posenc train takes (a "model" section, no grid axes) is valid as shipped.
  const AtRepositoryRoot at_root;
  int configs = 0;
  for (const auto& [path, j] : shipped_configs()) {
    if (!j.contains("model") || j.contains("schemes") || j.contains("base")) continue;
    ++configs;
    posenc::Config cfg;
    ASSERT_NO_THROW(cfg = posenc::load_config(path.string())) << path;
    EXPECT_NO_THROW(posenc::make_task(cfg.task)) << path;
  }
  EXPECT_GE(configs, 5);
}

TEST(CompareCli, StatusShowsARunThatAPosencTrainHolds) {
  // compare --run (an array task, or a second terminal) holds the run's train lock:
  // --status reports the run as running instead of failing on the lock.
  Scratch s("posenc_status_running");
  const std::string grid = s.write("grid.json", tiny_grid()), out = (s.dir / "out").string();
  const ComparePlan plan = posenc::plan_comparison(grid, out, false, 1);
  const fs::path dir = plan.run_dir(plan.runs.front());
  fs::create_directories(dir);
  const posenc::DirectoryLock held(dir.string(), posenc::run_files::kTrainLock, "posenc train");
  const auto r = posenc::testing::run_cli("compare " + grid + " --out " + out + " --status");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(r.output.find(plan.runs.front().id + "  running") != std::string::npos ||
              r.output.find("1 running") != std::string::npos)
      << r.output;
}

}  // namespace POSENC_TEST_UNIT
