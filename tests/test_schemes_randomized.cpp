// Randomized positions (randomized.cpp): sorted distinct draws, a pure function
// of seed and step, and what the config and training make of them.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "posenc/positional/randomized.h"
#include "posenc/train/trainer.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

TEST(RandomizedPositions, SortedDistinctInRangeAndAPureFunctionOfSeedAndStep) {
  for (int64_t step : {0, 1, 7, 1000}) {
    const auto ids = randomized_positions(17, 256, 3, step);
    ASSERT_EQ(ids.size(0), 17);
    EXPECT_TRUE(torch::all(ids.slice(0, 1) > ids.slice(0, 0, 16)).item<bool>());  // sorted and distinct
    EXPECT_GE(ids.min().item<int64_t>(), 0);
    EXPECT_LT(ids.max().item<int64_t>(), 256);
    EXPECT_TRUE(torch::equal(ids, randomized_positions(17, 256, 3, step)));  // deterministic
  }
  EXPECT_FALSE(torch::equal(randomized_positions(17, 256, 3, 1), randomized_positions(17, 256, 3, 2)));
  EXPECT_FALSE(torch::equal(randomized_positions(17, 256, 3, 1), randomized_positions(17, 256, 4, 1)));
  EXPECT_TRUE(torch::equal(randomized_positions(5, 5, 0, 9), torch::arange(5, torch::kLong)));  // all of [0, 5)
  // Over many draws every position of [0, N) is used: positions past training get trained.
  auto seen = torch::zeros({64}, torch::kBool);
  for (int64_t step = 0; step < 200; ++step) seen.index_fill_(0, randomized_positions(8, 64, 0, step), true);
  EXPECT_TRUE(seen.all().item<bool>());
}

TEST(RandomizedPositions, ConfigRoundTripTablesThatAreTooSmallAndTraining) {
  const auto dir = posenc::testing::fresh_dir("randomized");
  auto cfg =
      posenc::testing::small_config(dir, {"train.steps=30", "model.positional.randomize={\"max_position\": 64}"});
  EXPECT_EQ(cfg.model.positional.randomize_max_position, 64);
  EXPECT_EQ(config_to_json(config_from_json(config_to_json(cfg))), config_to_json(cfg));
  EXPECT_THROW(posenc::testing::small_config(dir, {"model.positional.randomize={}"}), ConfigError);
  EXPECT_THROW(posenc::testing::small_config(dir, {"model.positional.randomize={\"max_position\": 64, \"x\": 1}"}),
               ConfigError);
  // A learned table must hold every position training may draw.
  const auto learned = posenc::testing::small_config(
      dir, {"model.positional={\"type\": \"learned\", \"max_positions\": 32, \"randomize\": {\"max_position\": 64}}"});
  try {
    Transformer model(learned.model, task_vocab_size(learned.task));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("randomize.max_position=64"), std::string::npos) << e.what();
  }
  // Below the training length it is refused before training.
  TrainRequest opts;
  opts.skip_final_eval = true;
  EXPECT_THROW(train(posenc::testing::small_config(dir, {"model.positional.randomize={\"max_position\": 4}"}), opts),
               ConfigError);
  // Training with it runs, and evaluation (0..L-1) is unaffected by the option.
  const auto result = train(cfg, opts);
  EXPECT_EQ(result.steps, 30);
  std::filesystem::remove_all(dir);
}

}  // namespace POSENC_TEST_UNIT
