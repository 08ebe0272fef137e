// Linear probes of the residual stream (analysis/probe.h, `posenc probe`):
// the regression itself, what the kept streams are, the mathematical cases a
// probe must get right, and the command.
#include <gtest/gtest.h>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/analysis/probe.h"
#include "posenc/model/decoder.h"
#include "posenc/model/encoder.h"
#include "posenc/tasks/task.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

TEST(Probe, RecoversALinearTargetAndFindsNothingInNoise) {
  torch::manual_seed(3);
  const int64_t n = 4000, f = 8;
  auto x = torch::randn({n, f}, torch::kFloat64);
  x.select(1, 2).mul_(1e6);                                           // standardisation makes scale irrelevant
  x = torch::cat({x, torch::full({n, 1}, 7.0, torch::kFloat64)}, 1);  // a constant feature is dropped, not singular
  const auto w = torch::randn({f + 1}, torch::kFloat64);
  const auto y = x.matmul(w) + 5.0;
  // An exact linear target: the ridge penalty 1e-9 per row shrinks the
  // standardised weights by about 1e-9 of themselves, so predictions err by
  // about 1e-9 of the target's spread (float64 rounding is far below that).
  const auto exact = fit_linear_probe(x, y, n / 2, 1e-9);
  EXPECT_GT(exact.r2, 1 - 1e-9);
  EXPECT_LT(exact.mean_abs_error, 1e-6 * y.std().item<double>());
  // A target independent of the features: the held-out R^2 of a fit to noise is
  // about -F / n_fit = -0.004 (overfitting), with a spread of the same order.
  const auto noise = torch::randn({n}, torch::kFloat64);
  const auto none = fit_linear_probe(x, noise, n / 2, 1e-6);
  EXPECT_LT(none.r2, 0.02);
  EXPECT_GT(none.r2, -0.05);
  EXPECT_THROW(fit_linear_probe(x, y, 1, 1e-3), c10::Error);  // too few fitted rows
}

TEST(Probe, TheClassifierReadsCategoriesThatLieOnNoLineBySize) {
  // Five classes at the corners of a regular pentagon, in the order 0..4
  // around it, with noise of 0.05 on a unit circle: no line orders them by
  // value (the regression cannot round to them all), but each class's
  // centre scores highest on its own rows. The nearest boundary lies
  // sin(36°) = 0.59 = 12 noise deviations from a centre: no row crosses it.
  torch::manual_seed(5);
  const int64_t n = 4000;
  const auto label = torch::randint(0, 5, {n}, torch::kLong);
  const auto angle = label.to(torch::kFloat64) * (2 * M_PI / 5);
  auto x = torch::stack({angle.cos(), angle.sin()}, 1) + 0.05 * torch::randn({n, 2}, torch::kFloat64);  // (N, 2)
  x = torch::cat({x, torch::randn({n, 6}, torch::kFloat64)}, 1);  // and 6 features of noise
  const auto y = label.to(torch::kFloat64);
  const auto pentagon = fit_linear_probe(x, y, n / 2, 1e-6);
  EXPECT_EQ(pentagon.class_accuracy, 1.0);
  EXPECT_EQ(pentagon.logistic_accuracy, 1.0);
  EXPECT_LT(pentagon.rounded_accuracy, 0.5);  // about 0.26: a line through the circle mixes 0 with 4
  // Features that hold nothing: about the share of the commonest class, 0.2,
  // within 5 deviations sqrt(0.2 · 0.8 / 2000) = 0.009 of it.
  const auto nothing = fit_linear_probe(torch::randn({n, 8}, torch::kFloat64), y, n / 2, 1e-6);
  EXPECT_NEAR(nothing.class_accuracy, 0.2, 0.045);
  EXPECT_NEAR(nothing.logistic_accuracy, 0.2, 0.045);
  // A class the fitted rows lack is never read: rows of class 4, scored by a
  // probe fitted on classes 0-3, are all wrong.
  const auto seen = label.lt(4), unseen = label.eq(4);
  const auto probe = fit_probe(x.index({seen}), y.index({seen}), 1e-6);
  EXPECT_EQ(probe.classes.size(0), 4);
  const auto unseen_fit = score_probe(probe, x.index({unseen}), y.index({unseen}));
  EXPECT_EQ(unseen_fit.class_accuracy, 0.0);
  EXPECT_EQ(unseen_fit.logistic_accuracy, 0.0);
  const auto seen_fit = score_probe(probe, x.index({seen}), y.index({seen}));
  EXPECT_EQ(seen_fit.class_accuracy, 1.0);
  EXPECT_EQ(seen_fit.logistic_accuracy, 1.0);
}

TEST(Probe, TheLogisticClassifierReadsAMiddleClassThatLeastSquaresMasks) {
  // Three classes at -1, 0 and +1 on one feature, with noise of 0.1, in
  // equal numbers in each half. Least squares fits each class's indicator by
  // a line with the same intercept (the share, 1/3): the middle class's is
  // flat, the outer ones' slope by about ±0.5, so at every row one outer
  // class scores above the middle one (the middle's sampled slope, about
  // 0.003, is far below 0.5): it reads the outer two thirds and masks the
  // middle (Hastie et al., The Elements of Statistical Learning, 4.2).
  // Softmax gives the middle class a large intercept and no slope; its
  // boundaries near ±0.5 lie 5 noise deviations from each centre, crossed by
  // a row in 3.5 million.
  torch::manual_seed(11);
  const int64_t n = 3000;
  const auto label = torch::arange(n, torch::kLong).remainder(3);  // 0, 1, 2, 0, ...
  const auto x = ((label.to(torch::kFloat64) - 1.0) + 0.1 * torch::randn({n}, torch::kFloat64)).unsqueeze(1);  // (N, 1)
  const auto y = label.to(torch::kFloat64);
  const auto fit = fit_linear_probe(x, y, n / 2, 1e-6);
  EXPECT_EQ(fit.logistic_accuracy, 1.0);
  EXPECT_DOUBLE_EQ(fit.class_accuracy, 1000.0 / 1500);  // every outer row, no middle one
}

TEST(Probe, TheLogisticClassifierIsLeftOutPastItsBudget) {
  // As many classes as rows: rows times classes past kLogisticBudget, so only
  // the least-squares classifier is fitted, and the logistic reading is NaN.
  const int64_t n = 4096;  // 4096 rows of 4096 classes: 2^24 > 2^23
  static_assert(int64_t{4096} * 4096 > kLogisticBudget);
  const auto position = torch::arange(n, torch::kFloat64);
  const auto x = torch::stack({position, position.sqrt()}, 1);  // (N, 2)
  const auto probe = fit_probe(x, position, 1e-6);
  EXPECT_FALSE(probe.logistic_w.defined());
  EXPECT_EQ(probe.classes.size(0), n);
  const auto fit = score_probe(probe, x, position);
  EXPECT_TRUE(std::isnan(fit.logistic_accuracy));
  EXPECT_GT(fit.r2, 0.99);  // the regression is fitted as before
}

TEST(Probe, KeepsTheInputOfEveryBlockAndTheLastOutput) {
  // A decoder without positions: what block 1 reads is the token table's rows.
  auto cfg = posenc::testing::small_next_token_config("decoder", "none", {});
  Decoder model(cfg.model, 16);
  model->eval();
  const auto tokens = torch::randint(1, 17, {3, 9}, torch::kLong);
  model->keep_hidden_states(true);
  torch::NoGradGuard no_grad;
  model->forward(tokens);
  const auto states = model->hidden_states();
  ASSERT_EQ(states.size(), static_cast<size_t>(cfg.model.layers + 1));
  for (const auto& s : states) EXPECT_EQ(s.sizes(), (std::vector<int64_t>{3, 9, cfg.model.d_model}));
  const auto table = model->named_parameters()["tokens.weight"];
  EXPECT_TRUE(torch::equal(states[0], table.index_select(0, tokens.flatten()).view({3, 9, cfg.model.d_model})));
  EXPECT_FALSE(torch::equal(states[1], states[0]));  // block 1 wrote into the stream
  model->keep_hidden_states(false);
  model->forward(tokens);
  EXPECT_TRUE(model->hidden_states().empty());
}

/// Position probes of an untrained encoder of `scheme` (width 64, 2 layers,
/// mean pooling) on 400 rows of 16 tokens drawn independently and uniformly.
std::vector<ProbeFit> untrained_encoder_probes(const std::string& scheme) {
  const Config cfg =
      posenc::testing::config_with({"model.positional.type=" + scheme, "model.d_model=64", "model.heads=4",
                                    "model.layers=2", "model.d_ff=128", "model.pooling=mean", "task.vocab_size=16"});
  torch::manual_seed(11);
  Encoder model(cfg.model, 16);
  model->eval();
  const auto tokens = torch::randint(1, 17, {400, 16}, torch::kLong);
  model->keep_hidden_states(true);
  torch::NoGradGuard no_grad;
  model->forward(tokens);
  return probe_positions(model->hidden_states(), 200, 1e-6);
}

TEST(Probe, AnEncoderWithoutPositionsHoldsNoneAndALearnedTableHoldsThemBeforeBlock1) {
  // Without positions an encoder is permutation-equivariant: the state at
  // position p is a function of token p and of the row's multiset of tokens.
  // With tokens exchangeable across positions, every position's states are
  // alike in distribution, so no probe beats the mean: held-out R^2 is about
  // -F / n_fit = -64 / 3200 = -0.02 at every layer.
  for (const auto& fit : untrained_encoder_probes("none")) {
    EXPECT_LT(fit.r2, 0.05);
    EXPECT_GT(fit.mean_abs_error, 3.0);  // the mean's own error over 0..15 is 4
  }
  // A learned table adds one vector per position: 16 token rows and 16
  // position rows span at most 32 of 64 dimensions, so a linear map reads the
  // position exactly before block 1 (the ridge penalty aside).
  const auto learned = untrained_encoder_probes("learned");
  EXPECT_GT(learned.front().r2, 0.99);
  EXPECT_GT(learned.front().rounded_accuracy, 0.99);
}

/// An arithmetic task of the overrides (task.type and its options), for its probe targets.
std::unique_ptr<Task> arithmetic_task(std::initializer_list<std::string> overrides) {
  std::vector<std::string> all = {"model.kind=decoder"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return make_task(posenc::testing::config_with(all).task);
}

/// The digit a token writes (tokens 1..10 are digits 0..9), or -1 for any other token.
int digit_of(int64_t token) { return token >= 1 && token <= 10 ? static_cast<int>(token - 1) : -1; }

TEST(Probe, AdditionsColumnAndCarryTargetsAreWhatTheSumNeeds) {
  // 3-digit operands, least-significant first: a0 a1 a2 + b0 b1 b2 SEP s0 s1 s2 s3.
  const auto task = arithmetic_task({"task.type=addition"});
  const auto set = task->fixed_set(3, 50, 9);
  const auto column = task->probe_target("column", 3, 50, 9), carry = task->probe_target("carry", 3, 50, 9);
  ASSERT_EQ(set.tokens.size(1), 12);
  const std::vector<double> columns = {0, 1, 2, NAN, 0, 1, 2, NAN, 0, 1, 2, 3};
  for (int64_t r = 0; r < 50; ++r) {
    for (int64_t t = 0; t < 12; ++t) {
      const double c = column[r][t].item<double>();
      EXPECT_TRUE(std::isnan(columns[t]) ? std::isnan(c) : c == columns[t]) << "token " << t << ": " << c;
    }
    // The carry into column j sits at the token that predicts s_j (SEP for s0,
    // s_{j-1} after it), and with the operands' digits it makes s_j.
    int into = 0;
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t query = 7 + j;  // SEP is token 7
      EXPECT_EQ(carry[r][query].item<double>(), into) << "row " << r << ", column " << j;
      const int a = j < 3 ? digit_of(set.tokens[r][j].item<int64_t>()) : 0;
      const int b = j < 3 ? digit_of(set.tokens[r][4 + j].item<int64_t>()) : 0;
      EXPECT_EQ(digit_of(set.tokens[r][query + 1].item<int64_t>()), (a + b + into) % 10);
      into = (a + b + into) / 10;
    }
    for (int64_t t = 0; t < 7; ++t) EXPECT_TRUE(std::isnan(carry[r][t].item<double>())) << "the prompt's token " << t;
    EXPECT_TRUE(std::isnan(carry[r][11].item<double>())) << "the last digit predicts nothing";
  }
  // Some sums carry, some do not: the target varies.
  EXPECT_GT(carry.nan_to_num(0).sum().item<double>(), 0);
}

TEST(Probe, AColumnSumIsWhatItsColumnAddsWithItsDigitAsUnitsAndItsCarryOutAsTens) {
  // N x 3 with written carries: a0 .. a3 * b0 b1 b2 SEP p0 c0 p1 c1 ... p6 c6.
  // Every value is recomputed here from the example's own words.
  const auto task = arithmetic_task({"task.type=multiplication", "task.multiplier_digits=3", "task.carries=written",
                                     "task.min_length=2", "task.max_length=5"});
  const auto set = task->fixed_set(4, 30, 7);
  const auto sums = task->probe_target("column_sum", 4, 30, 7), parity = task->probe_target("sum_parity", 4, 30, 7);
  const auto carry_out = task->probe_target("carry_out", 4, 30, 7);
  const int64_t width = set.tokens.size(1), start = set.answer_start;
  ASSERT_EQ(width, 4 + 1 + 3 + 1 + 2 * 7);
  int64_t large = 0;  // columns adding up to 100 or more: the target is more than a digit
  for (int64_t r = 0; r < 30; ++r) {
    std::vector<std::string> words;
    for (int64_t t = 0; t < width; ++t) words.push_back(task->decode_text({set.tokens[r][t].item<int64_t>()}));
    ASSERT_EQ(words[4], "*");
    ASSERT_EQ(words[start - 1], "=");
    int64_t carry_in = 0;
    for (int64_t j = 0; j < 7; ++j) {
      int64_t adds = carry_in;
      for (int64_t l = 0; l < 3; ++l)
        if (j - l >= 0 && j - l < 4) adds += std::stoi(words[j - l]) * std::stoi(words[5 + l]);
      const int64_t query = start - 1 + 2 * j;  // SEP, then the carry c_{j-1}: what predicts p_j
      EXPECT_EQ(sums[r][query].item<double>(), adds) << "row " << r << ", column " << j;
      EXPECT_EQ(parity[r][query].item<double>(), adds % 2) << "row " << r << ", column " << j;
      EXPECT_EQ(std::stoi(words[query + 1]), adds % 10) << "its units are the digit written next";
      EXPECT_EQ(words[query + 2], "c" + std::to_string(adds / 10)) << "its tens are the carry written after it";
      EXPECT_EQ(carry_out[r][query + 1].item<double>(), adds / 10) << "the carry out, at the digit that predicts it";
      carry_in = adds / 10;
      large += adds >= 100;
    }
    for (int64_t t = 0; t < width; ++t)
      if (t < start - 1 || (t - start) % 2 == 0 || t == width - 1) {  // the prompt, each product digit, the last
        EXPECT_TRUE(std::isnan(sums[r][t].item<double>())) << "row " << r << ", token " << t;
        EXPECT_TRUE(std::isnan(parity[r][t].item<double>())) << "row " << r << ", token " << t;
      }
    for (int64_t t = 0; t < width; ++t)
      if (t < start || (t - start) % 2 == 1) {  // the prompt, SEP and each written carry
        EXPECT_TRUE(std::isnan(carry_out[r][t].item<double>())) << "row " << r << ", token " << t;
      }
  }
  EXPECT_GT(large, 0) << "some of the 210 columns add up to three digits";
  // Without written carries no token predicts the carry out: the target is refused, naming the setting.
  const TaskConfig hidden =
      posenc::testing::config_with({"model.kind=decoder", "task.type=multiplication", "task.multiplier_digits=3",
                                    "task.min_length=2", "task.max_length=5"})
          .task;
  EXPECT_EQ(probe_target_spec(hidden, "carry").name, "carry");
  try {
    probe_target_spec(hidden, "carry_out");
    ADD_FAILURE() << "carry_out without written carries";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--target carry_out: defined only where task.carries=written (this "
                                         "model's is task.carries=hidden)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_task(hidden)->probe_target("carry_out", 4, 30, 7), std::logic_error) << "the task's own guard";
  // Addition: a column adds two digits and the carry, at most 19.
  const auto adding = arithmetic_task({"task.type=addition"});
  const auto added = adding->probe_target("column_sum", 3, 20, 1), carry = adding->probe_target("carry", 3, 20, 1);
  const auto plain = adding->fixed_set(3, 20, 1);
  for (int64_t r = 0; r < 20; ++r)
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t query = 7 + j;  // a0 a1 a2 + b0 b1 b2 SEP s0 s1 s2 s3
      const int a = j < 3 ? digit_of(plain.tokens[r][j].item<int64_t>()) : 0;
      const int b = j < 3 ? digit_of(plain.tokens[r][4 + j].item<int64_t>()) : 0;
      EXPECT_EQ(added[r][query].item<double>(), a + b + carry[r][query].item<double>()) << r << ", " << j;
    }
}

TEST(Probe, ArithmeticTargetsFollowHintsPlacementsAndWrittenCarries) {
  // Index hints put hint j before every digit of significance j: the column of
  // a digit is its hint's index, and the carry into column j sits at the hint
  // before s_j, which is what predicts s_j.
  {
    const auto task =
        arithmetic_task({"task.type=addition", "task.index_hints=8", "task.min_length=2", "task.max_length=4"});
    const auto set = task->fixed_set(3, 10, 2);
    const auto column = task->probe_target("column", 3, 10, 2), carry = task->probe_target("carry", 3, 10, 2);
    const int64_t width = set.tokens.size(1);
    for (int64_t r = 0; r < 10; ++r)
      for (int64_t t = 1; t < width; ++t) {
        const std::string word = task->decode_text({set.tokens[r][t - 1].item<int64_t>()});
        const bool digit = digit_of(set.tokens[r][t].item<int64_t>()) >= 0;
        if (digit && word[0] == 'h') {
          EXPECT_EQ(column[r][t].item<double>(), std::stod(word.substr(1))) << t;
        }
        if (!digit) {
          EXPECT_TRUE(std::isnan(column[r][t].item<double>())) << "not a digit: " << t;
        }
        if (t >= set.answer_start) {  // hints predict digits; digits predict hints
          EXPECT_EQ(std::isnan(carry[r][t].item<double>()), digit) << "token " << t;
        }
      }
  }
  // Written carries: the token before p_j is the carry c_{j-1} itself, whose value the target is.
  {
    const auto task = arithmetic_task({"task.type=multiplication", "task.multiplier_digits=2", "task.carries=written",
                                       "task.min_length=2", "task.max_length=4"});
    const auto set = task->fixed_set(4, 20, 5);
    const auto carry = task->probe_target("carry", 4, 20, 5);
    int64_t written = 0;
    for (int64_t r = 0; r < 20; ++r)
      for (int64_t t = set.answer_start; t + 1 < set.tokens.size(1); ++t) {
        const std::string word = task->decode_text({set.tokens[r][t].item<int64_t>()});
        if (word[0] != 'c') continue;
        EXPECT_EQ(carry[r][t].item<double>(), std::stod(word.substr(1))) << "row " << r << ", token " << t;
        ++written;
      }
    EXPECT_EQ(written, 20 * 5);  // c0..c4 of six columns, the last carry followed by nothing
  }
  // b beside each digit of a: every copy of b's digit l has column l.
  {
    const auto task =
        arithmetic_task({"task.type=multiplication", "task.multiplier_digits=1",
                         "task.multiplier_placement=beside_each_digit", "task.min_length=2", "task.max_length=4"});
    const auto column = task->probe_target("column", 3, 4, 1);
    // a0 b0 a1 b0 a2 b0 * SEP p0 p1 p2 p3
    const std::vector<double> columns = {0, 0, 1, 0, 2, 0, NAN, NAN, 0, 1, 2, 3};
    ASSERT_EQ(column.size(1), 12);
    for (int64_t t = 0; t < 12; ++t) {
      const double c = column[0][t].item<double>();
      EXPECT_TRUE(std::isnan(columns[t]) ? std::isnan(c) : c == columns[t]) << "token " << t << ": " << c;
    }
  }
}

TEST(Probe, OrderingsDescentMarksEachTokenBelowItsPredecessor) {
  const auto task = make_task(posenc::testing::config_with({"task.type=ordering"}).task);
  const auto set = task->fixed_set(12, 40, 4);
  const auto descent = task->probe_target("descent", 12, 40, 4);
  for (int64_t r = 0; r < 40; ++r) {
    EXPECT_TRUE(std::isnan(descent[r][0].item<double>()));
    double descents = 0;
    for (int64_t t = 1; t < 12; ++t) {
      const bool below = set.tokens[r][t].item<int64_t>() < set.tokens[r][t - 1].item<int64_t>();
      EXPECT_EQ(descent[r][t].item<double>(), below ? 1.0 : 0.0);
      descents += descent[r][t].item<double>();
    }
    EXPECT_EQ(descents == 0, set.labels[r].item<int64_t>() == 1) << "sorted exactly where nothing descends";
  }
}

TEST(Probe, OnlyTheTokensATargetIsDefinedAtAreFittedAndScored) {
  // Two features: the first is the target where it is defined, the second is
  // noise; undefined tokens carry a feature value far from any target, which
  // would wreck the fit if they were kept.
  torch::manual_seed(5);
  const int64_t b = 40, l = 10;
  auto target = torch::randint(0, 5, {b, l}, torch::kLong).to(torch::kFloat64);  // (B, L)
  auto feature = target.clone();
  target.select(1, 0).fill_(NAN);
  feature.select(1, 0).fill_(1e3);
  const auto state = torch::stack({feature, torch::randn({b, l}, torch::kFloat64)}, 2);  // (B, L, 2)
  const auto fits = probe_target_values({state}, target, b / 2, 1e-9);
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_GT(fits[0].r2, 1 - 1e-6);
  EXPECT_EQ(fits[0].rounded_accuracy, 1.0);
  // The baseline is the share of held-out targets equal to the fitted ones' most common value: about 1/5.
  EXPECT_GT(fits[0].baseline_accuracy, 0.1);
  EXPECT_LT(fits[0].baseline_accuracy, 0.3);
}

/// The JSON a command printed on standard output, past any log lines on standard error before it.
json json_on_stdout(const std::string& output) {
  const size_t start = output.rfind('{', 0) == 0 ? 0 : output.find("\n{");
  EXPECT_NE(start, std::string::npos) << output;
  return json::parse(output.substr(start == 0 ? 0 : start + 1));
}

TEST(Probe, ACheckpointIsProbedAtEachLengthAndBadRequestsAreRefused) {
  posenc::testing::Scratch s("probe_cli");
  const std::string config = posenc::testing::write_config(
      s, "config.json",
      {"model.positional.type=learned", "model.positional.max_positions=32", "model.d_model=64", "model.d_ff=128",
       "train.steps=3", "train.eval_every=3", "train.checkpoint_every=3", "eval.lengths=[8]",
       "eval.samples_per_length=8", "train.val_samples=8"});
  ASSERT_EQ(posenc::testing::run_cli("train " + config + " --out " + s.path("run")).code, 0);
  const std::string ckpt = s.path("run") + "/checkpoint.pt";

  auto r = posenc::testing::run_cli("probe " + ckpt + " --lengths 8,16 --samples 40 --json " + s.path("p.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("R^2"), std::string::npos) << r.output;  // the table beside the file
  const json j = json::parse(read_file(s.path("p.json")));
  EXPECT_EQ(j["scheme"], "learned");
  ASSERT_EQ(j["lengths"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& l = j["lengths"][i];
    EXPECT_EQ(l["length"], i == 0 ? 8 : 16);
    EXPECT_EQ(l["positions"], i == 0 ? 8 : 16);  // max pooling: no CLS token
    EXPECT_EQ(l["fitted_examples"], 20);
    ASSERT_EQ(l["layers"].size(), 3u);  // before blocks 1 and 2, after block 2
    // Block 1 reads tokens plus a table row per position: the position is in it.
    EXPECT_GT(l["layers"][0]["r2"].get<double>(), 0.9);
  }
  // Without --json: the JSON on standard output. 4 examples of 8 tokens fit
  // 32 tokens for 64 features, which a warning on standard error says.
  r = posenc::testing::run_cli("probe " + ckpt + " --samples 8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(json_on_stdout(r.output)["lengths"][0]["length"], 8);  // task.max_length
  EXPECT_EQ(json_on_stdout(r.output)["lengths"][0]["features"], 64);
  EXPECT_NE(r.output.find("32 tokens fitted for 64 features"), std::string::npos) << r.output;
  r = posenc::testing::run_cli("probe " + ckpt + " --samples 200");  // 800 tokens for 64: no warning
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("tokens fitted for"), std::string::npos) << r.output;

  r = posenc::testing::run_cli("probe " + ckpt + " --lengths 8,8");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "--lengths: 8 appears twice");
  r = posenc::testing::run_cli("eval " + ckpt + " --lengths 8,16,8");  // the same check as eval's
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "--lengths: 8 appears twice");
  // A request refused with exit 2, its message naming `names`.
  const auto expect_refused = [&](const std::string& flags, const std::string& names) {
    const auto refused = posenc::testing::run_cli("probe " + ckpt + " " + flags);
    EXPECT_EQ(refused.code, 2) << flags << ": " << refused.output;
    EXPECT_NE(refused.output.find(names), std::string::npos) << flags << ": " << refused.output;
  };
  expect_refused("--lengths 64", "64");  // past the table's 32 rows
  expect_refused("--samples 3", "--samples");
  // --fit-lengths: the probes fitted once, at 8, score every length's held-out half.
  r = posenc::testing::run_cli("probe " + ckpt + " --lengths 8,16 --samples 40 --fit-lengths 8");
  ASSERT_EQ(r.code, 0) << r.output;
  const json transfer = json_on_stdout(r.output);
  EXPECT_EQ(transfer["fit_lengths"], json::array({8}));
  EXPECT_EQ(j["fit_lengths"], json::array());
  for (size_t layer = 0; layer < 3; ++layer)  // at the fitted length itself, the very probes of the default
    EXPECT_DOUBLE_EQ(transfer["lengths"][0]["layers"][layer]["r2"].get<double>(),
                     j["lengths"][0]["layers"][layer]["r2"].get<double>());
  EXPECT_EQ(transfer["lengths"][1]["fitted_examples"], 20);
  EXPECT_EQ(transfer["lengths"][1]["fitted_tokens"], 20 * 8);  // fitted at 8, scored on 20 x 16 tokens
  EXPECT_EQ(transfer["lengths"][1]["held_out_tokens"], 20 * 16);
  // Block 1 reads token + table row: the rows of positions 0..7 were fitted and
  // read the same at 16; rows 8..15 never were, and the probe reads nothing there.
  double seen_error = 0, unseen_error = 0;
  for (const auto& m : transfer["lengths"][1]["layers"][0]["by_target"]) {
    const double error = std::abs(m["mean_prediction"].get<double>() - m["target"].get<double>());
    (m["target"].get<double>() < 8 ? seen_error : unseen_error) += error / 8;
  }
  EXPECT_LT(seen_error, 0.5);
  EXPECT_GT(unseen_error, 2.0);
  // Fitted on two lengths together: both lengths' fitted halves.
  r = posenc::testing::run_cli("probe " + ckpt + " --lengths 16 --samples 40 --fit-lengths 6,8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(json_on_stdout(r.output)["lengths"][0]["fitted_examples"], 40);
  EXPECT_EQ(json_on_stdout(r.output)["lengths"][0]["fitted_tokens"], 20 * 6 + 20 * 8);
  expect_refused("--fit-lengths 64", "64");  // checked as a length is
  expect_refused("--fit-lengths 1", "--fit-lengths");
  expect_refused("--fit-lengths 8,8", "--fit-lengths: 8 appears twice");

  // A task's own target, here ordering's descent (every token but the first).
  r = posenc::testing::run_cli("probe " + ckpt + " --target descent --samples 40");
  ASSERT_EQ(r.code, 0) << r.output;
  const json descent = json_on_stdout(r.output);
  EXPECT_EQ(descent["target"], "descent");
  EXPECT_EQ(descent["lengths"][0]["length"], 8);  // task.max_length
  EXPECT_EQ(descent["lengths"][0]["fitted_tokens"], 20 * 7);
  EXPECT_EQ(descent["lengths"][0]["held_out_tokens"], 20 * 7);
  const double baseline = descent["lengths"][0]["layers"][0]["baseline_accuracy"].get<double>();
  EXPECT_GT(baseline, 0.5);  // most neighbours are in order, even in the negatives
  EXPECT_LT(baseline, 1.0);
  for (const auto& layer : descent["lengths"][0]["layers"]) {  // shares of the 140 held-out tokens
    for (const char* key : {"class_accuracy", "logistic_accuracy"}) {
      ASSERT_TRUE(layer[key].is_number()) << key << ": " << layer.dump();  // 140 rows of 2 classes: fitted
      const double classed = layer[key].get<double>();
      EXPECT_GE(classed, 0.0);
      EXPECT_LE(classed, 1.0);
      EXPECT_DOUBLE_EQ(classed * 140, std::round(classed * 140));
    }
  }
  r = posenc::testing::run_cli("probe " + ckpt + " --target carry");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output,
                                         "--target carry: task ordering has no such probe target (it has: position, "
                                         "remaining, descent)");
  r = posenc::testing::run_cli("probe " + ckpt + " --target ''");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "--target: must not be empty");

  // A decoder reads every token but the last; an encoder_decoder the source x
  // with its encoder, and SEP and y less its last token with its decoder.
  for (const std::string kind : {"decoder", "encoder_decoder"}) {
    const json cfg = config_to_json(posenc::testing::small_next_token_config(
        kind, "rope",
        {"train.steps=2", "train.eval_every=2", "train.checkpoint_every=2", "task.min_length=4", "task.max_length=6",
         "eval.lengths=[6]", "eval.samples_per_length=8", "train.val_samples=8"}));
    write_file_atomic(s.path(kind + ".json"), cfg.dump(2));
    ASSERT_EQ(posenc::testing::run_cli("train " + s.path(kind + ".json") + " --out " + s.path(kind)).code, 0);
    r = posenc::testing::run_cli("probe " + s.path(kind) + "/checkpoint.pt --samples 8");
    ASSERT_EQ(r.code, 0) << r.output;
    const json j = json_on_stdout(r.output);
    EXPECT_EQ(j["target"], "position");
    if (kind == "decoder") {
      EXPECT_EQ(j["lengths"][0]["positions"], 2 * 6);  // `x SEP` and x, less the last token
      EXPECT_FALSE(j["lengths"][0].contains("decoder"));
    } else {
      EXPECT_EQ(j["lengths"][0]["positions"], 6);             // x
      EXPECT_EQ(j["lengths"][0]["decoder"]["positions"], 6);  // SEP and x, less the last token
    }
  }
}

TEST(Probe, ATargetTheCheckpointsConfigLacksIsRefusedNamingTheSetting) {
  // N x 1 multiplication without written carries: no token predicts a carry out.
  posenc::testing::Scratch s("probe_carry_out");
  const auto trained = posenc::testing::train_shipped(
      "multiplication.json", s.path("run"),
      "--set train.steps=2 --set train.eval_every=2 --set train.checkpoint_every=2 --set eval.lengths=[3]"
      " --set eval.samples_per_length=8 --set train.val_samples=8");
  ASSERT_EQ(trained.code, 0) << trained.output;
  const auto r = posenc::testing::run_cli("probe " + s.path("run") + "/checkpoint.pt --target carry_out --samples 8");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "--target carry_out: defined only where task.carries=written");
}

TEST(Probe, AnEncoderDecoderIsProbedOverEachSideWithoutItsPadding) {
  // SCAN: commands of 1 to 9 words padded at their end to 9, then SEP, the
  // answer's actions and the end token. A learned table of each side's
  // positions (each counting from 0) puts them into what block 1 reads.
  posenc::testing::Scratch s("probe_encoder_decoder");
  const std::vector<std::string> overrides = {"model.kind=encoder_decoder",
                                              "task.type=scan",
                                              "model.d_model=64",
                                              "model.heads=4",
                                              "model.layers=2",
                                              "model.decoder_layers=1",
                                              "model.d_ff=128",
                                              "model.positional.type=learned",
                                              "train.steps=2",
                                              "train.eval_every=2",
                                              "train.checkpoint_every=2",
                                              "eval.lengths=[24]",
                                              "eval.samples_per_length=8",
                                              "train.val_samples=8"};
  const Config cfg = posenc::testing::config_with(overrides);
  write_file_atomic(s.path("config.json"), config_to_json(cfg).dump(2));
  ASSERT_EQ(posenc::testing::run_cli("train " + s.path("config.json") + " --out " + s.path("run")).code, 0);
  auto r = posenc::testing::run_cli("probe " + s.path("run") + "/checkpoint.pt --lengths 6 --samples 200 --json " +
                                    s.path("p.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("decoder, over the target"), std::string::npos) << r.output;  // the table has both sides
  const json j = json::parse(read_file(s.path("p.json")));
  EXPECT_EQ(j["kind"], "encoder_decoder");
  const auto& source = j["lengths"][0];
  const auto& target = source["decoder"];

  // Only the command's words are probed in the source, and every target token (no padding there: 6 actions each).
  const TaskBatch set = make_task(cfg.task)->fixed_set(6, 200, cfg.eval.seed);
  ASSERT_EQ(set.tokens.size(0), 200);
  const int64_t a = set.answer_start;
  const auto words = set.tokens.narrow(1, 0, a - 1).ne(0);  // (200, 9)
  EXPECT_EQ(source["positions"], a - 1);
  EXPECT_EQ(source["fitted_tokens"], words.narrow(0, 0, 100).sum().item<int64_t>());
  EXPECT_EQ(source["held_out_tokens"], words.narrow(0, 100, 100).sum().item<int64_t>());
  EXPECT_LT(source["fitted_tokens"].get<int64_t>(), 100 * (a - 1));  // some commands are shorter than 9 words
  EXPECT_EQ(target["positions"], 7);                                 // SEP and 6 actions
  EXPECT_EQ(target["fitted_tokens"], 100 * 7);
  ASSERT_EQ(source["layers"].size(), 3u);  // before encoder blocks 1 and 2, after block 2
  ASSERT_EQ(target["layers"].size(), 2u);  // before and after the decoder's one block
  EXPECT_NE(target["layers"][0]["reads"].get<std::string>().find("decoder block 1"), std::string::npos);
  // About 20 token rows and 9 (or 7) position rows span fewer than 64
  // dimensions: each side's position is read exactly where its table row was
  // fitted. Commands of 8 or 9 words are rare: a held-out token at a position
  // no fitted command reached is misread (a linear probe learns no direction it
  // never saw), which costs R^2 but few tokens.
  EXPECT_GT(target["layers"][0]["r2"].get<double>(), 0.99);
  EXPECT_GT(source["layers"][0]["rounded_accuracy"].get<double>(), 0.98);
  // Where fitted, the ridge alone moves a prediction: it shrinks each direction
  // of spread s² by λ / (s² + λ), and the directions between two positions'
  // rows are thin beside the tokens' (measured: within 0.003 of the position).
  int64_t common = 0;  // positions of at least 20 held-out tokens: surely fitted too
  for (const auto& m : source["layers"][0]["by_target"]) {
    if (m["tokens"].get<int64_t>() < 20) continue;
    EXPECT_NEAR(m["mean_prediction"].get<double>(), m["target"].get<double>(), 0.02) << m.dump();
    ++common;
  }
  EXPECT_GE(common, 6);  // commands of 6 actions have at least 3 words; most have 6 or more

  // `remaining`: the decoder still has 6 actions to write after SEP and 0 after
  // the last (the end token comes next); the encoder, the command's words after
  // each word.
  r = posenc::testing::run_cli("probe " + s.path("run") +
                               "/checkpoint.pt --target remaining --lengths 6 --samples 200");
  ASSERT_EQ(r.code, 0) << r.output;
  const json left = json_on_stdout(r.output)["lengths"][0];
  std::vector<int64_t> decoder_values;
  for (const auto& m : left["decoder"]["layers"][0]["by_target"]) {
    decoder_values.push_back(static_cast<int64_t>(m["target"].get<double>()));
    EXPECT_EQ(m["tokens"], 100) << m.dump();
  }
  EXPECT_EQ(decoder_values, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  // A learned table: 6 - position, read exactly before decoder block 1.
  EXPECT_GT(left["decoder"]["layers"][0]["r2"].get<double>(), 0.99);
  // Each held-out command of w words has one word with w - 1 after it: the
  // count at the largest value is the commands of 9 words.
  const auto held = set.tokens.narrow(0, 100, 100).narrow(1, 0, a - 1).ne(0).sum(1);  // (100) words per command
  EXPECT_EQ(left["held_out_tokens"], held.sum().item<int64_t>());
  const auto& values = left["layers"][0]["by_target"];
  EXPECT_EQ(values.front()["target"], 0.0);
  EXPECT_EQ(values.front()["tokens"], 100);  // every command's last word
  EXPECT_EQ(values.back()["target"].get<double>(), held.max().item<int64_t>() - 1);
  EXPECT_EQ(values.back()["tokens"], held.eq(held.max()).sum().item<int64_t>());
}

}  // namespace POSENC_TEST_UNIT
