// LogN scaling (model.attention.logn_from = N; Chiang & Cholak 2022, Qwen's
// logn attention): the logits of a query that sees n > N keys times
// log n / log N, those of a query that sees N or fewer unchanged. Its formula
// against an independent computation, the exact identity within N (what lets
// `posenc eval --set` turn it on for a trained model), the KV cache and the
// fused path agreeing with the explicit forward, alone and beside
// Scalable-Softmax, and the config and CLI that reach it.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_helpers.h"
#include "helpers.h"
#include "length_factor_checks.h"
#include "posenc/compat.h"
#include "posenc/model/attention.h"
#include "posenc/model/decoder.h"
#include "posenc/model/encoder.h"
#include "posenc/model/transformer.h"
#include "reliability_helpers.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

Config logn_config(const std::string& kind, const std::string& scheme, int64_t n, double ssmax = 0.0) {
  return posenc::testing::small_next_token_config(
      kind, scheme,
      {"model.attention.logn_from=" + std::to_string(n), "model.attention.log_length_scale=" + std::to_string(ssmax)});
}

}  // namespace

TEST(LogNScaling, WeightsAreTheSoftmaxOfTheLogitsTimesLogNOverLogNPastN) {
  // Causal attention with ALiBi's bias and N = 5: query i sees n_i = i + 1
  // keys, and its weights must be softmax_j(max(1, log n_i / log 5) (q_i.k_j /
  // sqrt(Dh) + b_ij)), computed here in float64 from the same q, k and bias.
  torch::manual_seed(0);
  const int64_t D = 16, H = 2, N = 5;
  MultiHeadAttention attention(MultiHeadAttentionOptions(D, H).project_input(false).causal(true).length_factors(
      {/*log_length_scale=*/0.0, /*logn_from=*/N}));
  posenc::testing::expect_alibi_attention_scaled(attention, H, D / H, [&](int64_t, int64_t i) {
    return std::max(1.0, std::log(i + 1.0) / std::log(static_cast<double>(N)));
  });
}

TEST(LogNScaling, QueriesThatSeeNoMoreThanNKeysAreExactlyAsTrained) {
  // It adds no parameter, so one seed builds the same weights with and
  // without it. A decoder's queries that see at most N keys give the same
  // logits to the last bit (their factor is exactly 1); the later ones differ.
  // An encoder's every query sees all L keys: identical up to L = N, all
  // different past it.
  const int64_t N = 9;
  for (const char* scheme : {"none", "rope", "alibi", "kerple", "t5"}) {
    auto with = posenc::testing::random_positional_model<Decoder>(logn_config("decoder", scheme, N).model, 4);
    auto without = posenc::testing::random_positional_model<Decoder>(logn_config("decoder", scheme, 0).model, 4);
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(1, 17, {2, 20}, torch::kLong);
    const auto a = with->forward(tokens), b = without->forward(tokens);  // (2, 20, V)
    EXPECT_TRUE(torch::equal(a.narrow(1, 0, N), b.narrow(1, 0, N))) << scheme;
    EXPECT_FALSE(torch::allclose(a.narrow(1, N, 20 - N), b.narrow(1, N, 20 - N))) << scheme;
  }
  // An ordering encoder (nothing is trained, so its run directory is never written).
  const Config plain = posenc::testing::small_config("unused", {"model.positional.type=kerple"});
  const Config scaled = posenc::testing::small_config(
      "unused", {"model.positional.type=kerple", "model.attention.logn_from=" + std::to_string(N)});
  auto with = posenc::testing::random_positional_model<Encoder>(scaled.model, 5);
  auto without = posenc::testing::random_positional_model<Encoder>(plain.model, 5);
  torch::NoGradGuard no_grad;
  // The encoder pools by max over L tokens (no CLS), so its queries see L keys.
  const auto within = torch::randint(1, 17, {3, N}, torch::kLong),
             past = torch::randint(1, 17, {3, N + 6}, torch::kLong);
  EXPECT_TRUE(torch::equal(with->forward(within), without->forward(within)));
  EXPECT_FALSE(torch::allclose(with->forward(past), without->forward(past)));
}

TEST(LogNScaling, KvCacheAndTheFusedPathGiveTheExplicitWholeSequencesLogits) {
  // n is counted per query, so a decoder step from the cache must see the
  // factor of its row of the whole sequence's causal mask; with
  // Scalable-Softmax on too, the two factors multiply.
  for (const double ssmax : {0.0, 0.7})
    for (const char* scheme : {"none", "rope", "alibi", "kerple"}) {
      auto model = posenc::testing::random_positional_model<Decoder>(logn_config("decoder", scheme, 6, ssmax).model, 2);
      posenc::testing::expect_cache_and_fused_match_explicit(model,
                                                             std::string(scheme) + " ssmax " + std::to_string(ssmax));
    }
}

TEST(LogNScaling, TheConfigRefusesOneAndEvalMayTurnItOnForATrainedModel) {
  EXPECT_NE(posenc::testing::config_error({"model.attention.logn_from=1"}).find("logn_from: 1 would divide by log 1"),
            std::string::npos);
  EXPECT_NE(posenc::testing::config_error({"model.attention.logn_from=-3"}).find("logn_from"), std::string::npos);
  for (const char* kind : {"decoder", "encoder_decoder"}) {
    Transformer model(logn_config(kind, "alibi", 8).model, 16);
    Transformer plain(logn_config(kind, "alibi", 0).model, 16);
    EXPECT_EQ(model->parameters().size(), plain->parameters().size()) << kind << ": it adds no parameter";
  }

  // A copy decoder trained on rows of at most 2 * 6 + 1 tokens: its queries saw at most 12 keys. Turned on at
  // N = 12 by eval, length 6 scores exactly as without it, and the run records the change.
  posenc::testing::Scratch s("logn");
  const std::string run = s.path("run");
  auto r = posenc::testing::train_shipped(
      "copy.json", run,
      "--set train.steps=30 --set task.min_length=3 --set task.max_length=6 "
      "--set eval.lengths=[6,12] --set eval.samples_per_length=40 "
      "--set train.val_samples=16 --set train.warmup_steps=5 --set model.d_model=32 --set model.d_ff=64");
  ASSERT_EQ(r.code, 0) << r.output;
  r = posenc::testing::run_cli("eval " + run + "/checkpoint.pt --out " + s.path("plain.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = posenc::testing::run_cli("eval " + run + "/checkpoint.pt --set model.attention.logn_from=12 --out " +
                               s.path("logn.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json plain = read_json_file(s.path("plain.json"));
  const json logn = read_json_file(s.path("logn.json"));
  EXPECT_EQ(logn["overrides"], json::array({"model.attention.logn_from=12"}));
  EXPECT_EQ(plain["lengths"][0]["length"], 6);
  EXPECT_EQ(logn["lengths"][0]["token_accuracy"], plain["lengths"][0]["token_accuracy"]);
  EXPECT_EQ(logn["lengths"][0]["exact_match"], plain["lengths"][0]["exact_match"]);
  r = posenc::testing::run_cli("eval " + run + "/checkpoint.pt --set model.attention.logn_from=1 --out " +
                               s.path("one.json"));
  EXPECT_EQ(r.code, 2);
  posenc::testing::expect_one_line_error(r.output, "logn_from: 1 would divide by log 1");
}

}  // namespace POSENC_TEST_UNIT
