// The head-based attention scale (model.attention.head_scale; Wang et al.
// 2024): every logit of head h times a learned lambda_h, 1 at the start. Its
// formula against an independent computation, alone and beside LogN scaling;
// the exact identity at lambda = 1 (what lets a trained model take it on);
// the KV cache and the fused path against the explicit forward; and the
// training options that tune it alone on a trained model (train.init_from,
// train.trainable): the rest of the model stays bit for bit as the checkpoint
// has it, and the scales learn back a temperature taken from the model.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_helpers.h"
#include "helpers.h"
#include "length_factor_checks.h"
#include "posenc/model/attention.h"
#include "posenc/model/decoder.h"
#include "posenc/model/transformer.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/trainer.h"
#include "reliability_helpers.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

Config head_scale_config(const std::string& kind, const std::string& scheme, int64_t logn_from = 0) {
  return posenc::testing::small_next_token_config(
      kind, scheme, {"model.attention.head_scale=true", "model.attention.logn_from=" + std::to_string(logn_from)});
}

/// Sets every head scale of `model` to a value drawn from [0.5, 2.5].
void draw_head_scales(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters())
    if (is_head_scale(p.key())) p.value().uniform_(0.5, 2.5);
}

}  // namespace

TEST(HeadScale, WeightsAreTheSoftmaxOfEachHeadsLogitsTimesItsScale) {
  // Causal attention with ALiBi's bias: head h's weights must be
  // softmax_j(lambda_h (q_i.k_j / sqrt(Dh) + b_ij)), computed here in float64;
  // with LogN scaling from N = 5 as well, the two factors multiply.
  torch::manual_seed(0);
  const int64_t D = 16, H = 2;
  const std::vector<double> lambda = {0.4, 2.5};
  for (const int64_t N : {int64_t{0}, int64_t{5}}) {
    LengthFactors factors;
    factors.logn_from = N;
    factors.head_scale = true;
    MultiHeadAttention attention(
        MultiHeadAttentionOptions(D, H).project_input(false).causal(true).length_factors(factors));
    {
      torch::NoGradGuard no_grad;
      attention->named_parameters()["head_scale"].copy_(torch::tensor({lambda[0], lambda[1]}));
    }
    posenc::testing::expect_alibi_attention_scaled(attention, H, D / H, [&](int64_t h, int64_t i) {
      const double logn = N == 0 ? 1.0 : std::max(1.0, std::log(i + 1.0) / std::log(static_cast<double>(N)));
      return lambda[h] * logn;
    });
  }
}

TEST(HeadScale, AtOneTheModelIsExactlyTheModelWithoutIt) {
  // lambda starts at 1 and is drawn from no random stream, so one seed builds
  // the same weights with and without it, and every logit is multiplied by
  // exactly 1: the same outputs to the last bit, on the explicit and the fused
  // path. This is what lets train.init_from add it to a trained model.
  for (const char* kind : {"decoder", "encoder_decoder"})
    for (const char* scheme : {"none", "rope", "alibi", "kerple", "t5"}) {
      Transformer with(head_scale_config(kind, scheme).model, 16);
      Transformer without(posenc::testing::small_next_token_config(kind, scheme, {}).model, 16);
      // One lambda per attention: 2 decoder blocks; 2 encoder blocks and 2 decoder blocks of self- and cross-attention.
      const size_t attentions = std::string(kind) == "decoder" ? 2 : 6;
      ASSERT_EQ(with->parameters().size(), without->parameters().size() + attentions) << kind;
      auto source = without->named_parameters();
      {
        torch::NoGradGuard no_grad;
        for (auto& p : with->named_parameters())
          if (!is_head_scale(p.key())) p.value().copy_(source[p.key()]);
      }
      with->eval();
      without->eval();
      torch::NoGradGuard no_grad;
      // x SEP y: 5 prompt tokens, SEP (token 17), 5 answer tokens.
      auto tokens = torch::randint(1, 17, {2, 11}, torch::kLong);
      tokens.select(1, 5).fill_(with->cls_token());
      for (const bool explicit_path : {true, false}) {
        with->force_explicit_attention(explicit_path);
        without->force_explicit_attention(explicit_path);
        EXPECT_TRUE(
            torch::equal(with->next_token()->answer_logits(tokens, 6), without->next_token()->answer_logits(tokens, 6)))
            << kind << " " << scheme << (explicit_path ? " explicit" : " fused");
      }
    }
}

TEST(HeadScale, KvCacheAndTheFusedPathGiveTheExplicitWholeSequencesLogits) {
  for (const int64_t N : {int64_t{0}, int64_t{6}})
    for (const char* scheme : {"none", "rope", "alibi", "kerple"}) {
      auto model = posenc::testing::random_positional_model<Decoder>(head_scale_config("decoder", scheme, N).model, 2);
      draw_head_scales(*model);
      posenc::testing::expect_cache_and_fused_match_explicit(model,
                                                             std::string(scheme) + " logn_from " + std::to_string(N));
    }
}

TEST(HeadScale, TheConfigRefusesTuningWithoutTheScalesOrACheckpoint) {
  EXPECT_NE(posenc::testing::config_error({"train.trainable=head_scale", "train.init_from=x.pt"})
                .find("model.attention.head_scale is false"),
            std::string::npos);
  EXPECT_NE(posenc::testing::config_error({"train.trainable=head_scale", "model.attention.head_scale=true"})
                .find("give train.init_from"),
            std::string::npos);
  EXPECT_NE(posenc::testing::config_error({"train.init_from=\"\""}).find("train.init_from: must not be empty"),
            std::string::npos);
  EXPECT_NE(posenc::testing::config_error({"train.trainable=everything"}).find("is not one of all, head_scale"),
            std::string::npos);
}

TEST(HeadScale, TuningAloneLearnsBackATemperatureTakenFromTheModelAndLeavesTheRestAsItWas) {
  // A NoPE copy decoder trained briefly; then its queries are scaled by 0.3,
  // which flattens every logit by 0.3 (no bias, no rotation), and the result
  // is saved as a checkpoint. Tuned alone from it on the same task, the head
  // scales must learn their way back towards 1 / 0.3 and the accuracy with
  // them, while every other weight stays the flattened checkpoint's to the bit.
  posenc::testing::Scratch s("head_scale");
  const std::string source = s.path("source");
  const std::string common =
      "--set model.positional.type=none --set task.min_length=3 --set task.max_length=6 --set eval.lengths=[6] "
      "--set eval.samples_per_length=200 --set train.val_samples=16 --set model.d_model=32 --set model.d_ff=64";
  auto r = posenc::testing::train_shipped("copy.json", source, common + " --set train.steps=800");
  ASSERT_EQ(r.code, 0) << r.output;

  Config cfg;
  Transformer model = load_model(source + "/checkpoint.pt", torch::kCPU, &cfg);
  const double flatten = 0.3;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key().find("attention.qkv") != std::string::npos)  // rows [0, D) of W_qkv and its bias make q
        p.value().narrow(0, 0, cfg.model.d_model).mul_(flatten);
  }
  const std::string flat = s.path("flat.pt");
  save_checkpoint(flat, model, nullptr, 0, cfg);

  r = posenc::testing::run_cli("eval " + flat + " --out " + s.path("flat.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  // Tuned in two segments (stopped after its step-75 checkpoint, then
  // resumed), as a preempted job would be: --resume must hold the rest of the
  // model fixed too.
  const std::string tuned = s.path("tuned");
  const Config tune = load_config(
      std::string(POSENC_SOURCE_DIR) + "/configs/copy.json",
      {"model.positional.type=none", "task.min_length=3", "task.max_length=6", "eval.lengths=[6]",
       "eval.samples_per_length=200", "train.val_samples=16", "model.d_model=32", "model.d_ff=64",
       "model.attention.head_scale=true", "train.init_from=" + flat, "train.trainable=head_scale", "train.steps=150",
       "train.checkpoint_every=25", "train.lr=0.1", "train.warmup_steps=0", "train.out_dir=" + tuned});
  TrainRequest segment;
  segment.stop_at_step = 75;
  train(tune, segment);
  segment.stop_at_step = 0;
  segment.resume = true;
  const TrainResult result = train(tune, segment);
  EXPECT_EQ(result.steps, 150);

  Transformer after = load_model(tuned + "/checkpoint.pt", torch::kCPU);
  auto before = model->named_parameters();
  double lambda_sum = 0;
  int64_t heads = 0;
  for (const auto& p : after->named_parameters()) {
    if (is_head_scale(p.key())) {
      lambda_sum += p.value().sum().item<double>();
      heads += p.value().numel();
    } else {
      EXPECT_TRUE(torch::equal(p.value(), before[p.key()])) << p.key() << " changed";
    }
  }
  ASSERT_EQ(heads, 12);
  // results.json records where each head's lambda ended.
  const json recorded = read_json_file(tuned + "/results.json")["head_scale"];
  ASSERT_EQ(recorded.size(), 3u) << recorded.dump();
  const auto layer = after->named_parameters()["blocks.1.attention.head_scale"];
  for (int64_t h = 0; h < 4; ++h)
    EXPECT_DOUBLE_EQ(recorded["blocks.1.attention.head_scale"][h].get<double>(), layer[h].item<double>());
  // 1 / 0.3 = 3.3 undoes the flattening exactly (measured: a mean of 3.31);
  // other mixes of heads may fit as well, so the band is wide, but it is far
  // from the start at 1 and from any drift of 150 steps of size 0.1 without a
  // signal behind it.
  EXPECT_GT(lambda_sum / heads, 2.3);
  EXPECT_LT(lambda_sum / heads, 4.5);
  const double flat_accuracy = read_json_file(s.path("flat.json"))["lengths"][0]["token_accuracy"];
  const double tuned_accuracy = read_json_file(tuned + "/results.json")["lengths"][0]["token_accuracy"];
  const double trained_accuracy = read_json_file(source + "/results.json")["lengths"][0]["token_accuracy"];
  // Measured: 0.407 flattened, 0.628 tuned, 0.635 as trained (600 answer tokens each).
  EXPECT_GT(tuned_accuracy, flat_accuracy + 0.1) << "flattened " << flat_accuracy << ", tuned " << tuned_accuracy;
  EXPECT_GT(tuned_accuracy, trained_accuracy - 0.05)
      << "as trained " << trained_accuracy << ", tuned " << tuned_accuracy;
}

TEST(HeadScale, InitFromRefusesACheckpointOfAnotherModel) {
  // Its parameters must all be this model's, of the same shape: a wider
  // model, or one without the head scales that the checkpoint has, is refused
  // by name before a step is trained.
  posenc::testing::Scratch s("head_scale_init");
  const std::string source = s.path("source");
  const std::string common =
      "--set train.steps=5 --set train.warmup_steps=0 --set task.min_length=3 --set task.max_length=6 --set "
      "eval.lengths=[6] "
      "--set eval.samples_per_length=20 --set train.val_samples=16 --set model.d_model=32 --set model.d_ff=64";
  auto r = posenc::testing::train_shipped("copy.json", source, common + " --set model.attention.head_scale=true");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ckpt = source + "/checkpoint.pt";
  r = posenc::testing::train_shipped("copy.json", s.path("wider"),
                                     common + " --set model.d_model=64 --set train.init_from=" + ckpt);
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "train.init_from " + ckpt + ": parameter");
  EXPECT_NE(r.output.find("parameter tokens.weight is [18, 32] there but [18, 64] in this model"), std::string::npos)
      << r.output;
  r = posenc::testing::train_shipped("copy.json", s.path("without"), common + " --set train.init_from=" + ckpt);
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "head_scale is not one of this model's");
  r = posenc::testing::train_shipped("copy.json", s.path("missing"),
                                     common + " --set train.init_from=" + s.path("nothing.pt"));
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "train.init_from: ");
  EXPECT_NE(r.output.find(s.path("nothing.pt")), std::string::npos) << r.output;
}

}  // namespace POSENC_TEST_UNIT
