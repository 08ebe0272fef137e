// A fixed logit scale (model.attention.logit_scale = t): every logit of every
// head times t, a softmax temperature of 1/t, with no parameter. Its formula
// against an independent computation, alone and beside LogN scaling and the
// head scale; a model with it against the same model whose queries were
// scaled by t instead (what it must equal where nothing else enters the
// logits); the KV cache and the fused path against the explicit forward; and
// the config and `posenc eval --set` that reach it.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_helpers.h"
#include "helpers.h"
#include "length_factor_checks.h"
#include "posenc/model/attention.h"
#include "posenc/model/decoder.h"
#include "posenc/model/transformer.h"
#include "reliability_helpers.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

Config logit_scale_config(const std::string& kind, const std::string& scheme, double t,
                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.attention.logit_scale=" + std::to_string(t)};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return posenc::testing::small_next_token_config(kind, scheme, sets);
}

}  // namespace

TEST(LogitScale, WeightsAreTheSoftmaxOfTheLogitsTimesT) {
  // Causal attention with ALiBi's bias: every head's weights must be
  // softmax_j(t (q_i.k_j / sqrt(Dh) + b_ij)), computed here in float64; with
  // LogN scaling from N = 5 and head scales as well, the three factors
  // multiply.
  torch::manual_seed(0);
  const int64_t D = 16, H = 2;
  const double t = 1.7;
  const std::vector<double> lambda = {0.4, 2.5};
  for (const bool others : {false, true}) {
    LengthFactors factors;
    factors.logit_scale = t;
    if (others) {
      factors.logn_from = 5;
      factors.head_scale = true;
    }
    MultiHeadAttention attention(
        MultiHeadAttentionOptions(D, H).project_input(false).causal(true).length_factors(factors));
    if (others) {
      torch::NoGradGuard no_grad;
      attention->named_parameters()["head_scale"].copy_(torch::tensor({lambda[0], lambda[1]}));
    }
    posenc::testing::expect_alibi_attention_scaled(attention, H, D / H, [&](int64_t h, int64_t i) {
      if (!others) return t;
      return t * lambda[h] * std::max(1.0, std::log(i + 1.0) / std::log(5.0));
    });
  }
}

TEST(LogitScale, EqualsTheModelWhoseQueriesAreScaledByT) {
  // Without a bias in the logits (NoPE, RoPE: a rotation is linear), q.k times
  // t is (t q).k: the model at scale t must give the logits of the model at
  // scale 1 whose W_qkv rows that make q (and their bias) are multiplied by t.
  // Both are computed in float32 from the same weights; they differ by the
  // rounding of a product taken in another order, a few float32 ulps a logit,
  // carried through the model.
  const double t = 2.5;
  for (const char* scheme : {"none", "rope"}) {
    const Config cfg = logit_scale_config("decoder", scheme, t);
    auto scaled = posenc::testing::random_positional_model<Decoder>(cfg.model, 3);
    auto plain = posenc::testing::random_positional_model<Decoder>(logit_scale_config("decoder", scheme, 1.0).model, 3);
    ASSERT_EQ(scaled->parameters().size(), plain->parameters().size()) << "it adds no parameter";
    {
      torch::NoGradGuard no_grad;
      auto source = scaled->named_parameters();
      for (auto& p : plain->named_parameters()) {
        p.value().copy_(source[p.key()]);
        if (p.key().find("attention.qkv") != std::string::npos)  // rows [0, D) of W_qkv and of its bias make q
          p.value().narrow(0, 0, cfg.model.d_model).mul_(t);
      }
    }
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(1, 17, {2, 12}, torch::kLong);
    const auto a = scaled->forward(tokens), b = plain->forward(tokens);  // (2, 12, V)
    EXPECT_TRUE(torch::allclose(a, b, tolerance::kFloat32Model, tolerance::kFloat32Model))
        << scheme << ": " << (a - b).abs().max().item<double>();
    // And t is not a no-op: the model at scale 1 with the original weights differs.
    auto original =
        posenc::testing::random_positional_model<Decoder>(logit_scale_config("decoder", scheme, 1.0).model, 3);
    {
      torch::NoGradGuard no_grad;
      auto source = scaled->named_parameters();
      for (auto& p : original->named_parameters()) p.value().copy_(source[p.key()]);
    }
    EXPECT_FALSE(torch::allclose(original->forward(tokens), a, 1e-3, 1e-3)) << scheme;
  }
}

TEST(LogitScale, KvCacheAndTheFusedPathGiveTheExplicitWholeSequencesLogits) {
  for (const char* scheme : {"none", "rope", "alibi", "kerple"}) {
    auto model = posenc::testing::random_positional_model<Decoder>(
        logit_scale_config("decoder", scheme, 0.6, {"model.attention.logn_from=6"}).model, 2);
    posenc::testing::expect_cache_and_fused_match_explicit(model, scheme);
  }
}

TEST(LogitScale, TheConfigRefusesNonPositiveScalesAndEvalMaySetItForATrainedModel) {
  EXPECT_NE(posenc::testing::config_error({"model.attention.logit_scale=0"}).find("model.attention.logit_scale"),
            std::string::npos);
  EXPECT_NE(posenc::testing::config_error({"model.attention.logit_scale=-1"}).find("model.attention.logit_scale"),
            std::string::npos);

  // A NoPE copy decoder trained briefly, evaluated as trained, at t = 1
  // (exactly the same scores: every logit times 1) and at t = 0.05 (attention
  // all but flat, so the copy fails), with the change recorded. Measured token
  // accuracy: 0.635 as trained, 0.240 at t = 0.05 (600 answer tokens each).
  posenc::testing::Scratch s("logit_scale");
  const std::string run = s.path("run");
  auto r = posenc::testing::train_shipped(
      "copy.json", run,
      "--set train.steps=800 --set task.min_length=3 --set task.max_length=6 --set model.positional.type=none "
      "--set eval.lengths=[6] --set eval.samples_per_length=200 "
      "--set train.val_samples=16 --set model.d_model=32 --set model.d_ff=64");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto eval_with = [&](const std::string& name, const std::string& set) {
    auto e = posenc::testing::run_cli("eval " + run + "/checkpoint.pt " + set + " --out " + s.path(name));
    EXPECT_EQ(e.code, 0) << e.output;
    return read_json_file(s.path(name));
  };
  const json plain = eval_with("plain.json", "");
  const json one = eval_with("one.json", "--set model.attention.logit_scale=1");
  const json flat = eval_with("flat.json", "--set model.attention.logit_scale=0.05");
  EXPECT_EQ(flat["overrides"], json::array({"model.attention.logit_scale=0.05"}));
  EXPECT_EQ(one["lengths"][0]["token_accuracy"], plain["lengths"][0]["token_accuracy"]);
  EXPECT_EQ(one["lengths"][0]["exact_match"], plain["lengths"][0]["exact_match"]);
  const double trained = plain["lengths"][0]["token_accuracy"];
  const double flattened = flat["lengths"][0]["token_accuracy"];
  EXPECT_GT(trained, 0.5) << "the copy decoder did not learn; the comparison below would mean nothing";
  EXPECT_LT(flattened, trained - 0.2);
  r = posenc::testing::run_cli("eval " + run + "/checkpoint.pt --set model.attention.logit_scale=0 --out " +
                               s.path("zero.json"));
  EXPECT_EQ(r.code, 2);
  posenc::testing::expect_one_line_error(r.output, "model.attention.logit_scale");
}

}  // namespace POSENC_TEST_UNIT
