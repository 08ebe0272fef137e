// Properties of the length-extrapolation biases (kerple, sandwich, DAPE) and of the
// `directional` option every symmetric bias shares.
#include <gtest/gtest.h>

#include "helpers.h"
#include "posenc/positional/randomized.h"
#include "posenc/positional/relative.h"
#include "posenc/train/trainer.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::arange_positions;
using posenc::testing::scheme_with;

namespace {

constexpr int64_t kHeads = 4, kHeadDim = 8;

PositionalScheme build(const std::string& type, const json& options = json::object()) {
  return scheme_with(type, {kHeads * kHeadDim, kHeads, kHeadDim, 0}, options);
}

/// (H, L, L) bias at positions 0..L-1.
torch::Tensor bias_of(const PositionalScheme& s, int64_t L) { return s->bias(arange_positions(L))[0].detach(); }

/// b[h, i, j] depends only on j - i (compared along every diagonal).
void expect_toeplitz(const torch::Tensor& b, const std::string& what) {
  const int64_t L = b.size(-1);
  for (int64_t i = 1; i < L; ++i)
    for (int64_t j = 1; j < L; ++j)
      ASSERT_TRUE(torch::allclose(b.select(-2, i).select(-1, j), b.select(-2, i - 1).select(-1, j - 1),
                                  tolerance::kFloat32Sum, tolerance::kFloat32Value))
          << what << " at (" << i << ", " << j << ")";
}

/// Registry schemes that declare the shared `directional` option.
std::vector<std::string> schemes_with_direction_option() {
  std::vector<std::string> out;
  for (const auto& info : scheme_registry())
    for (const auto& o : info.options)
      if (o.name == "directional") out.push_back(info.name);
  return out;
}

}  // namespace

TEST(Kerple, NegativeMonotoneToeplitzAndSymmetricAtInitialization) {
  for (const char* variant : {"log", "power"}) {
    torch::manual_seed(3);
    auto s = build("kerple", {{"variant", variant}});
    EXPECT_FALSE(s->directional());
    const auto b = bias_of(s, 24);  // (H, L, L)
    expect_toeplitz(b, variant);
    EXPECT_TRUE(torch::allclose(b, b.transpose(-1, -2))) << variant;
    EXPECT_TRUE(torch::all(b.diagonal(0, -2, -1) == 0).item<bool>()) << variant;
    // Row 0 is the bias against distance 0, 1, 2, ...: strictly decreasing for r1, r2 > 0.
    const auto row = b.select(-2, 0);  // (H, L)
    EXPECT_TRUE(torch::all(row.narrow(-1, 1, 23) < row.narrow(-1, 0, 23)).item<bool>()) << variant;
  }
}

TEST(Kerple, ParametersStayPositiveAndThePowerAtMostTwo) {
  for (const char* variant : {"log", "power"}) {
    auto s = build("kerple", {{"variant", variant}});
    {
      torch::NoGradGuard no_grad;
      for (auto& p : s->named_parameters()) p.value().fill_(p.key() == "r2" ? 9.0 : -3.0);  // r1 < 0, r2 large
    }
    const auto b = bias_of(s, 10);
    const double d = 9;  // distance of (0, 9)
    const double r1 = 1e-2 /* the default floor, min_r1 */, r2 = std::string(variant) == "power" ? 2.0 : 9.0;
    const double want = std::string(variant) == "power" ? -r1 * std::pow(d, r2) : -r1 * std::log1p(r2 * d);
    EXPECT_NEAR(b[0][0][9].item<double>(), want, tolerance::kFloat32Value) << variant;
    EXPECT_LE(b.max().item<double>(), 0.0);
  }
}

TEST(Kerple, FloorsKeepEveryHeadFallingOffWithDistance) {
  // min_r1 = 0.5, min_r2 = 1 (power): no head can flatten into a global one,
  // whatever its parameters; each starts at or above the floors with a gradient.
  auto s = build("kerple", {{"variant", "power"}, {"min_r1", 0.5}, {"min_r2", 1.0}});
  const auto params = s->named_parameters();
  EXPECT_GE(params["r1"].min().item<double>(), 0.5);
  EXPECT_GE(params["r2"].min().item<double>(), 1.0);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : s->named_parameters()) p.value().fill_(-1.0);
  }
  const auto row = bias_of(s, 40).select(-2, 0);  // (H, 40): bias against distance 0..39
  EXPECT_TRUE(torch::allclose(row, -0.5 * torch::arange(40, torch::kFloat32).expand_as(row)));
  EXPECT_THROW(build("kerple", {{"variant", "power"}, {"min_r2", 2.5}}), ConfigError);
}

TEST(Sandwich, ZeroOnTheDiagonalNegativeToeplitzAndWiderInLaterHeads) {
  auto s = build("sandwich");
  EXPECT_EQ(s->parameters().size(), 0u);  // parameter-free
  const auto b = bias_of(s, 40);
  expect_toeplitz(b, "sandwich");
  EXPECT_TRUE(torch::allclose(b, b.transpose(-1, -2)));
  EXPECT_TRUE(torch::all(b.diagonal(0, -2, -1).abs() < tolerance::kFloat32Value).item<bool>());
  EXPECT_LE(b.max().item<double>(), tolerance::kFloat32Value);
  // Head h divides by 8h/H: head 1's bias is H times head H's.
  EXPECT_TRUE(torch::allclose(b[0], b[kHeads - 1] * kHeads, tolerance::kFloat32Sum, tolerance::kFloat32Sum));
  // The same offsets give the same bias wherever they sit (no absolute position).
  auto shifted = s->bias({torch::arange(100, 140, torch::kLong), torch::arange(100, 140, torch::kLong), 140, nullptr});
  EXPECT_TRUE(torch::allclose(shifted[0], b, tolerance::kFloat32Sum, tolerance::kFloat32Sum));
}

TEST(Directional, EverySymmetricBiasSharesTheOption) {
  const auto names = schemes_with_direction_option();
  // Every bias scheme that cannot tell left from right at its defaults offers
  // the option (the registry and the schemes' own claims say which those are).
  for (const auto& info : scheme_registry()) {
    const auto s = build(info.name);
    if (!s->capabilities().bias || s->directional()) continue;
    EXPECT_NE(std::find(names.begin(), names.end(), info.name), names.end()) << info.name << " lacks `directional`";
  }
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    torch::manual_seed(5);  // the same initial weights (kerple's r1, r2) for both instances
    const auto symmetric = build(name);
    EXPECT_FALSE(symmetric->directional());
    const auto b0 = bias_of(symmetric, 9);
    EXPECT_TRUE(torch::allclose(b0.expand({kHeads, 9, 9}), b0.expand({kHeads, 9, 9}).transpose(-1, -2),
                                tolerance::kFloat32Value, tolerance::kFloat32Value));

    torch::manual_seed(5);
    auto s = build(name, {{"directional", true}});
    EXPECT_TRUE(s->directional());
    {
      torch::NoGradGuard no_grad;
      for (auto& p : s->named_parameters()) {
        if (p.key() == "left_offset") p.value().copy_(torch::arange(kHeads, torch::kFloat32) + 1);
        if (p.key() == "right_offset") p.value().copy_(-torch::arange(kHeads, torch::kFloat32));
      }
    }
    const auto b = bias_of(s, 9);  // (H, 9, 9)
    // The offsets land by side: keys left of the query get left_offset, right ones right_offset.
    const auto base = b0.expand({kHeads, 9, 9});
    for (int64_t h = 0; h < kHeads; ++h) {
      EXPECT_NEAR((b[h][5][2] - base[h][5][2]).item<double>(), h + 1.0, tolerance::kFloat32Sum);
      EXPECT_NEAR((b[h][2][5] - base[h][2][5]).item<double>(), -static_cast<double>(h), tolerance::kFloat32Sum);
      EXPECT_NEAR((b[h][4][4] - base[h][4][4]).item<double>(), 0.0, tolerance::kFloat32Value);
    }
    EXPECT_FALSE(torch::allclose(b, b.transpose(-1, -2)));
  }
}

namespace {

/// q (1, 1, L, Dh) rotated by a rope built with `options` at `positions`; `end` as a forward would pass it.
torch::Tensor rotated(const json& options, const torch::Tensor& x, const torch::Tensor& positions, int64_t end) {
  auto rope = scheme_with("rope", {kHeadDim, 1, kHeadDim, 0}, options);
  auto q = x.clone(), k = x.clone();
  rope->rotate(q, k, {positions, positions, end, nullptr});
  return q;
}

}  // namespace

TEST(RopeScaling, LinearAtSPEqualsUnscaledAtPAndDynamicIsUnscaledWithinTheOriginalLength) {
  torch::manual_seed(0);
  const auto x = torch::randn({1, 1, 10, kHeadDim}, torch::kFloat64);
  const auto p = torch::arange(10, torch::kLong);
  const auto plain = rotated(json::object(), x, p, 10);
  // linear, factor 3: position 3p rotates as p did.
  EXPECT_TRUE(
      torch::allclose(rotated({{"scaling", "linear"}, {"factor", 3.0}, {"original_max_position", 16}}, x, p * 3, 28),
                      plain, tolerance::kFloat64, tolerance::kFloat64));
  // dynamic_ntk: nothing changes while the sequence fits in original_max_position ...
  const json dynamic = {{"scaling", "dynamic_ntk"}, {"factor", 4.0}, {"original_max_position", 16}};
  EXPECT_TRUE(torch::allclose(rotated(dynamic, x, p, 16), plain, tolerance::kFloat64Closed, tolerance::kFloat64Closed));
  // ... and past it the low frequencies stretch (the first pair, theta_0 = 1, never changes).
  const auto longer = rotated(dynamic, x, p, 64);
  EXPECT_FALSE(torch::allclose(longer, plain, tolerance::kFloat32Value, tolerance::kFloat32Value));
  // Factor 1 is no scaling in the static modes (dynamic NTK, as in HF, still
  // stretches with L/L0 past the original length).
  for (const char* mode : {"linear", "ntk", "yarn"})
    EXPECT_TRUE(torch::allclose(rotated({{"scaling", mode}, {"factor", 1.0}, {"original_max_position", 8}}, x, p, 40),
                                plain, tolerance::kFloat64, tolerance::kFloat64))
        << mode;
  // Scaling without original_max_position is a clear error.
  EXPECT_THROW(scheme_with("rope", {kHeadDim, 1, kHeadDim, 0}, {{"scaling", "yarn"}, {"factor", 2.0}}), ConfigError);
  // So is a factor or an original length without a scaling: they would change nothing.
  EXPECT_THROW(scheme_with("rope", {kHeadDim, 1, kHeadDim, 0}, {{"factor", 2.0}}), ConfigError);
  EXPECT_THROW(scheme_with("rope", {kHeadDim, 1, kHeadDim, 0}, {{"original_max_position", 16}}), ConfigError);
}

TEST(RopeScaling, ScoresStillDependOnlyOnTheOffset) {
  torch::manual_seed(1);
  const auto q = torch::randn({1, 1, 1, kHeadDim}, torch::kFloat64),
             k = torch::randn({1, 1, 1, kHeadDim}, torch::kFloat64);
  for (const json& options :
       {json{{"scaling", "yarn"}, {"factor", 4.0}, {"original_max_position", 8}},
        json{{"scaling", "ntk"}, {"factor", 4.0}, {"original_max_position", 8}}, json{{"drop_low_frequencies", 0.5}}}) {
    const auto score = [&](int64_t m, int64_t n) {
      auto qm = rotated(options, q, torch::full({1}, m, torch::kLong), 64);
      auto kn = rotated(options, k, torch::full({1}, n, torch::kLong), 64);
      return (qm * kn).sum().item<double>();
    };
    EXPECT_NEAR(score(7, 3), score(30, 26), tolerance::kFloat64) << options.dump();
    EXPECT_NEAR(score(2, 9), score(40, 47), tolerance::kFloat64) << options.dump();
  }
  // p-RoPE: the dropped (lowest-frequency) pairs are not rotated at all.
  const auto x = torch::randn({1, 1, 5, kHeadDim}, torch::kFloat64);
  const auto out = rotated({{"drop_low_frequencies", 0.5}}, x, torch::arange(5, torch::kLong), 5);
  // layout half: pairs (i, i + R/2); the last R/4 of each half are the low frequencies.
  for (int64_t d : {2, 3, 6, 7}) EXPECT_TRUE(torch::allclose(out.select(-1, d), x.select(-1, d))) << d;
  EXPECT_FALSE(torch::allclose(out.select(-1, 1), x.select(-1, 1)));
}

TEST(Xpos, ScoresDependOnlyOnTheOffsetAndDecayWithItAsZetaToTheDistance) {
  torch::manual_seed(2);
  auto xpos = scheme_with("xpos", {kHeadDim, 1, kHeadDim, 0}, {{"scale_base", 16.0}});
  auto rope = scheme_with("rope", {kHeadDim, 1, kHeadDim, 0});
  const auto q = torch::randn({1, 1, 1, kHeadDim}, torch::kFloat64),
             k = torch::randn({1, 1, 1, kHeadDim}, torch::kFloat64);
  const auto score = [&](PositionalScheme& s, int64_t m, int64_t n) {
    auto qm = q.clone(), kn = k.clone(), unused_q = q.clone(), unused_k = k.clone();
    s->rotate(qm, unused_k, {torch::full({1}, m, torch::kLong), torch::full({1}, m, torch::kLong), 64, nullptr});
    s->rotate(unused_q, kn, {torch::full({1}, n, torch::kLong), torch::full({1}, n, torch::kLong), 64, nullptr});
    return (qm * kn).sum().item<double>();
  };
  EXPECT_NEAR(score(xpos, 10, 4), score(xpos, 40, 34), tolerance::kFloat64);
  EXPECT_NEAR(score(xpos, 3, 20), score(xpos, 33, 50), tolerance::kFloat64);
  // At offset 0 the scales cancel: the score is RoPE's.
  EXPECT_NEAR(score(xpos, 9, 9), score(rope, 9, 9), tolerance::kFloat64);
  EXPECT_TRUE(xpos->directional());
  EXPECT_TRUE(xpos->capabilities().fits_fused_attention());
}

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

TEST(Fire, RelativeUpToTheThresholdAndProgressivelyInterpolatedPastIt) {
  torch::manual_seed(4);
  auto s = build("fire", {{"init_threshold", 8.0}});
  EXPECT_FALSE(s->directional());
  // Queries below T share one normalizer psi(T): a function of |i - j| only.
  const auto near = bias_of(s, 8);
  expect_toeplitz(near, "fire below T");
  EXPECT_TRUE(torch::allclose(near, near.transpose(-1, -2), tolerance::kFloat32Value, tolerance::kFloat32Value));
  // Past T, a query's farthest key on the left (j = 0) always maps to psi(i)/psi(i) = 1,
  // the input the query at T gives its key at distance T: distances are squeezed into the trained range.
  const auto far = bias_of(s, 64);
  for (int64_t i : {8, 20, 63})
    EXPECT_TRUE(torch::allclose(far.select(-2, i).select(-1, 0), far.select(-2, 8).select(-1, 0),
                                tolerance::kFloat32Sum, tolerance::kFloat32Value))
        << i;
  // Gradients reach the MLP, c and the threshold. The output layer's bias, one
  // constant per head that the softmax cancels, is frozen.
  auto loss = s->bias(arange_positions(40)).sum();
  loss.backward();
  for (const auto& p : s->named_parameters()) {
    if (p.key() == "out.bias") {
      EXPECT_FALSE(p.value().requires_grad());
      continue;
    }
    EXPECT_TRUE(p.value().grad().defined() && p.value().grad().abs().sum().item<double>() > 0) << p.key();
  }
}

// DAPE with its MLP's output at zero is scores + KERPLE's log bias at the same r1, r2.
TEST(Dape, WithoutItsMlpIsTheScoresPlusKerplesLogBias) {
  auto dape = build("dape");
  auto kerple = build("kerple", {{"variant", "log"}});
  torch::NoGradGuard no_grad;
  auto dp = dape->named_parameters(), kp = kerple->named_parameters();
  kp["r1"].copy_(dp["r1"]);
  kp["r2"].copy_(dp["r2"]);
  dp["out.weight"].zero_();
  const int64_t L = 9;
  torch::manual_seed(3);
  auto scores = torch::randn({2, kHeads, L, L});
  auto out = dape->reweight(scores, arange_positions(L));
  EXPECT_TRUE(torch::allclose(out, scores + bias_of(kerple, L).unsqueeze(0), tolerance::kFloat32Value,
                              tolerance::kFloat32Value));
}

// f reads one query-key pair at a time: a score changed at (i, j) in one head
// changes the output at (i, j) (in every head) and nowhere else.
TEST(Dape, EachPairIsRefinedFromItsOwnScoresAlone) {
  auto dape = build("dape");
  torch::NoGradGuard no_grad;
  const int64_t L = 7;
  torch::manual_seed(4);
  auto scores = torch::randn({1, kHeads, L, L});
  auto changed = scores.clone();
  changed[0][1][4][2] += 3.0;
  auto moved = (dape->reweight(changed, arange_positions(L)) - dape->reweight(scores, arange_positions(L))).abs();
  auto elsewhere = moved.clone();
  elsewhere.select(2, 4).select(2, 2).zero_();  // (1, H): the changed pair in every head
  EXPECT_EQ(elsewhere.max().item<float>(), 0.0f);
  EXPECT_GT(moved[0][1][4][2].item<float>(), 0.0f) << "the changed score itself moves its output";
  EXPECT_GT(moved.select(2, 4).select(2, 2).sum().item<float>() - moved[0][1][4][2].item<float>(), 0.0f)
      << "the MLP mixes the heads of one pair";
}

}  // namespace POSENC_TEST_UNIT
