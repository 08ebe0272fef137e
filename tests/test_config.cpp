// Config parsing: defaults, each kind of error (with its JSON path), overrides, round trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "posenc/config.h"
#include "posenc/util/io.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using posenc::ConfigError;
using posenc::json;

namespace {

std::string error_of(const json& j) {
  try {
    posenc::config_from_json(j);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Config, EmptyObjectGivesDefaults) {
  const auto c = posenc::config_from_json(json::object());
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.positional.type, "rope");
  EXPECT_EQ(c.model.positional.options.at("base"), 10000.0);
  EXPECT_EQ(c.task.max_length, 16);
}

TEST(Config, ShippedConfigParses) {
  const auto c = posenc::load_config(std::string(POSENC_SOURCE_DIR) + "/configs/ordering.json");
  EXPECT_EQ(c.eval.lengths, (std::vector<int64_t>{8, 16, 32, 64, 128}));
}

TEST(Config, UnknownKeyNamesPath) {
  EXPECT_NE(error_of({{"model", {{"heads", 4}, {"hedas", 2}}}}).find("model.hedas: unknown key"), std::string::npos);
  EXPECT_NE(error_of({{"trian", json::object()}}).find("trian: unknown key"), std::string::npos);
}

TEST(Config, WrongTypeNamesPathAndExpectation) {
  const auto e = error_of({{"train", {{"steps", "many"}}}});
  EXPECT_NE(e.find("train.steps: expected an integer"), std::string::npos) << e;
  const auto e2 = error_of({{"model", {{"dropout", "high"}}}});
  EXPECT_NE(e2.find("model.dropout: expected a number"), std::string::npos) << e2;
}

TEST(Config, OutOfRangeNamesBounds) {
  const auto e = error_of({{"model", {{"dropout", 1.5}}}});
  EXPECT_NE(e.find("model.dropout: 1.5 is out of range"), std::string::npos) << e;
  const auto e2 = error_of({{"eval", {{"lengths", {8, 1}}}}});
  EXPECT_NE(e2.find("eval.lengths[1]"), std::string::npos) << e2;
}

TEST(Config, HeadsMustDivideWidth) {
  EXPECT_EQ(error_of({{"model", {{"heads", 3}, {"d_model", 64}}}}), "model.heads: 3 does not divide model.d_model 64");
}

TEST(Config, BadChoiceListsChoices) {
  const auto e = error_of({{"model", {{"pooling", "sum"}}}});
  EXPECT_NE(e.find("model.pooling: \"sum\" is not one of "), std::string::npos) << e;
  for (const char* choice : {"cls", "mean", "max", "lse"}) EXPECT_NE(e.find(choice), std::string::npos) << e;
}

TEST(Config, CrossFieldChecks) {
  EXPECT_NE(error_of({{"task", {{"min_length", 20}, {"max_length", 16}}}}).find("task.min_length"), std::string::npos);
  EXPECT_NE(
      error_of({{"task", {{"negatives", {{"shuffle", 0}, {"adjacent_swap", 0}, {"random_swap", 0}, {"reverse", 0}}}}}})
          .find("all weights are zero"),
      std::string::npos);
  EXPECT_NE(error_of({{"task", {{"negatives", {{"rotate", 1}}}}}}).find("task.negatives.rotate: unknown key"),
            std::string::npos);
}

TEST(Config, SchemeOptionsValidatedByRegistry) {
  EXPECT_NE(error_of({{"model", {{"positional", {{"type", "nope"}}}}}})
                .find("model.positional.type: unknown positional scheme \"nope\""),
            std::string::npos);
  EXPECT_NE(error_of({{"model", {{"positional", {{"type", "rope"}, {"max_positions", 5}}}}}})
                .find("model.positional.max_positions: unknown key for scheme \"rope\""),
            std::string::npos);
  EXPECT_NE(error_of({{"model", {{"positional", {{"type", "rope"}, {"layout", "diagonal"}}}}}})
                .find("model.positional.layout: \"diagonal\" is not one of half, interleaved"),
            std::string::npos);
  EXPECT_NE(error_of({{"model", {{"positional", {{"type", "learned"}, {"max_positions", 0}}}}}})
                .find("model.positional.max_positions: 0 is out of range"),
            std::string::npos);
}

TEST(Config, OverridesApplyInOrderAndParseJson) {
  json j = json::object();
  posenc::apply_override(j, "train.steps=20");
  posenc::apply_override(j, "model.pooling=cls");
  posenc::apply_override(j, "model.positional.type=learned");
  posenc::apply_override(j, "eval.lengths=[4,8]");
  const auto c = posenc::config_from_json(j);
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.model.pooling, posenc::Pooling::Cls);
  EXPECT_EQ(c.model.positional.type, "learned");
  EXPECT_EQ(c.eval.lengths, (std::vector<int64_t>{4, 8}));
  EXPECT_THROW(posenc::apply_override(j, "train.steps"), ConfigError);
  EXPECT_THROW(posenc::apply_override(j, "train.steps.x=1"), ConfigError);
}

TEST(Config, RoundTripIsStable) {
  json j;
  posenc::apply_override(j, "model.positional.type=learned");
  posenc::apply_override(j, "model.positional.max_positions=64");
  const auto c = posenc::config_from_json(j);
  const auto again = posenc::config_from_json(posenc::config_to_json(c));
  EXPECT_EQ(posenc::config_to_json(c), posenc::config_to_json(again));
  EXPECT_EQ(again.model.positional.options.at("max_positions"), 64);
}

TEST(Config, FileErrorsNameTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / "posenc_cfg_test";
  std::filesystem::create_directories(dir);
  const auto bad = (dir / "bad.json").string();
  std::ofstream(bad) << "{ \"model\": ";
  try {
    posenc::load_config(bad);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ": invalid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(posenc::load_config((dir / "missing.json").string()), ConfigError);
}

TEST(Config, AtomicWriteReplacesWholeFile) {
  const auto path = (std::filesystem::temp_directory_path() / "posenc_atomic.txt").string();
  posenc::write_file_atomic(path, "first version, long\n");
  posenc::write_file_atomic(path, "second\n");
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(all, "second\n");
}

}  // namespace POSENC_TEST_UNIT
