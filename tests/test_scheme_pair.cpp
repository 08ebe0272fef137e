// Two schemes in one attention (model.positional.with, positional/scheme_pair.h):
// what the pair computes, through a whole model; every scheme that acts in
// attention beside FoX's forget gate, causally and with a KV cache; the
// pairs that are refused, with messages that say why.
#include <gtest/gtest.h>

#include <set>

#include "helpers.h"
#include "posenc/model/decoder.h"
#include "posenc/model/encoder.h"
#include "posenc/model/encoder_decoder.h"
#include "posenc/positional/scheme_pair.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::config_error;
using posenc::testing::error_of;
using posenc::testing::small_next_token_config;

namespace {

/// `to`'s parameters set to `from`'s of the same name (every parameter of `to` must have one).
void copy_parameters(const torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  const auto source = from.named_parameters();
  for (auto& p : to.named_parameters()) {
    const torch::Tensor* value = source.find(p.key());
    ASSERT_NE(value, nullptr) << p.key();
    p.value().copy_(*value);
  }
}

/// Block 1's attention probabilities (H, L, L) of `model` over one row of tokens.
torch::Tensor first_block_attention(Decoder& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  model->keep_attention(true);
  model->forward(tokens);
  const auto maps = model->attention_maps();
  model->keep_attention(false);
  return maps.at(0)[0].to(torch::kFloat64);
}

}  // namespace

// A forget gate of constant f_h multiplies head h's attention on a key d tokens
// back by f_h^d and renormalizes (FoX's logit term is d log f_h): beside PaTH,
// block 1's attention must be PaTH's own reweighted so, PaTH's parameters the same.
TEST(SchemePair, AConstantForgetGateBesidePathReweightsPathsAttentionByDistance) {
  const Config paired =
      small_next_token_config("decoder", "path", {"model.positional.with={\"type\": \"fox\", \"gate\": \"constant\"}"});
  const Config alone = small_next_token_config("decoder", "path", {});
  auto pair = posenc::testing::random_positional_model<Decoder>(paired.model, 3);
  Decoder path(alone.model, 16);
  copy_parameters(*pair, *path);
  path->eval();

  const int64_t L = 12, H = paired.model.heads;
  const auto tokens = torch::randint(1, 17, {1, L}, torch::kLong);
  const auto with_gate = first_block_attention(pair, tokens);  // (H, L, L)
  const auto without = first_block_attention(path, tokens);

  const auto gate_bias = pair->named_parameters()["with_positional.gate_bias"].to(torch::kFloat64);  // (H)
  const auto i = torch::arange(L, torch::kFloat64).view({L, 1}), j = torch::arange(L, torch::kFloat64).view({1, L});
  const auto back = (i - j).clamp_min(0);                                               // (L, L)
  const auto decay = torch::exp(torch::log_sigmoid(gate_bias).view({H, 1, 1}) * back);  // f_h^(i-j)
  auto expected = without * decay;                                                      // (H, L, L)
  expected = expected / expected.sum(-1, true);
  ASSERT_GT((torch::log_sigmoid(gate_bias).abs()).min().item<double>(), 0.05) << "the gate must forget visibly";
  EXPECT_TRUE(torch::allclose(with_gate, expected, 0, tolerance::kFloat32Model))
      << (with_gate - expected).abs().max().item<double>();
  EXPECT_FALSE(torch::allclose(with_gate, without, 0, tolerance::kFloat32Model)) << "the gate changed nothing";
}

// The pair's hooks are the sum of its two schemes' (and only rotations
// compose): FoX's and PaTH's score terms, ALiBi's bias beside RoPE's rotation.
TEST(SchemePair, ItsTermsAreTheSumOfItsSchemesTerms) {
  const SchemeContext ctx{32, 4, 8, 0, /*causal=*/true};
  const auto path = posenc::testing::scheme_with("path", ctx), fox = posenc::testing::scheme_with("fox", ctx);
  const auto pair = pair_schemes(path.get(), fox.get(), "path", "fox");
  EXPECT_TRUE(pair->capabilities().score_terms);
  EXPECT_FALSE(pair->capabilities().fits_fused_attention());
  EXPECT_TRUE(pair->self_attention_only());
  const auto q = torch::randn({2, 4, 9, 8}), k = torch::randn({2, 4, 9, 8});
  const auto qk = torch::matmul(q, k.transpose(-1, -2));
  ForwardCache memo;
  Positions pos{torch::arange(9), torch::arange(9), 9, &memo};
  const auto sum = path->score_terms(q, k, qk, pos) + fox->score_terms(q, k, qk, pos);
  EXPECT_TRUE(torch::allclose(pair->score_terms(q, k, qk, pos), sum, 0, tolerance::kFloat32Sum));

  const auto rope = posenc::testing::scheme_with("rope", ctx), alibi = posenc::testing::scheme_with("alibi", ctx);
  const auto rotated_and_biased = pair_schemes(rope.get(), alibi.get(), "rope", "alibi");
  EXPECT_TRUE(rotated_and_biased->capabilities().fits_fused_attention());
  auto q1 = q.clone(), k1 = k.clone(), q2 = q.clone(), k2 = k.clone();
  rope->rotate(q1, k1, pos);
  rotated_and_biased->rotate(q2, k2, pos);
  EXPECT_TRUE(torch::equal(q1, q2) && torch::equal(k1, k2));
  EXPECT_TRUE(torch::equal(rotated_and_biased->bias(pos), alibi->bias(pos)));
  EXPECT_DOUBLE_EQ(rotated_and_biased->attention_flops(2, 4, 9, 9, 8),
                   rope->attention_flops(2, 4, 9, 9, 8) + alibi->attention_flops(2, 4, 9, 9, 8));
}

// Each scheme's parameters are the model's once, under names of their own, and
// the pair shares instances across layers as its schemes do.
TEST(SchemePair, EachSchemesParametersAreInTheModelOnce) {
  for (const bool shared : {true, false}) {
    const Config cfg =
        small_next_token_config("decoder", "path",
                                {"model.positional.with=fox",
                                 "model.positional.share_across_layers=" + std::string(shared ? "true" : "false")});
    Decoder model(cfg.model, 16);
    std::set<const void*> distinct;
    int64_t path_parameters = 0, fox_parameters = 0;
    for (const auto& p : model->named_parameters()) {
      distinct.insert(p.value().data_ptr());
      if (p.key().rfind("with_positional", 0) == 0) ++fox_parameters;
      if (p.key().rfind("positional", 0) == 0) ++path_parameters;
    }
    EXPECT_EQ(distinct.size(), model->parameters().size());
    const int64_t instances = shared ? 1 : cfg.model.layers;
    EXPECT_EQ(path_parameters, 3 * instances) << "M_h, u_h and b_h";
    EXPECT_EQ(fox_parameters, 2 * instances) << "w_h and b_h";
  }
}

// Every scheme that acts in attention, with FoX beside it in a decoder: later
// tokens leave earlier logits alone, and a KV cache gives the whole sequence's
// logits. Schemes that add to the residual stream are refused with a pointer
// to model.positional.input.
class EverySchemeWithAForgetGate : public ::testing::TestWithParam<std::string> {};

TEST_P(EverySchemeWithAForgetGate, IsCausalAndCachesWhereItActsInAttention) {
  const std::string scheme = GetParam();
  if (scheme == "fox" || scheme == "none") GTEST_SKIP() << "refused (SchemePair.RefusedPairsSayWhy)";
  const std::string error = config_error(
      {"task.type=copy", "model.kind=decoder", "model.positional.type=" + scheme, "model.positional.with=fox"});
  if (find_scheme(scheme).default_placement == Placement::Input) {
    EXPECT_NE(error.find("model.positional.input"), std::string::npos) << error;
    return;
  }
  ASSERT_EQ(error, "(no error)");
  const Config cfg = small_next_token_config("decoder", scheme, {"model.positional.with=fox"});
  auto model = posenc::testing::random_positional_model<Decoder>(cfg.model, 5);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(1, 17, {2, 14}, torch::kLong);
  auto changed = tokens.clone();
  changed.narrow(1, 9, 5).random_(1, 17);
  const auto whole = model->forward(tokens);  // (2, 14, 18)
  EXPECT_TRUE(torch::isfinite(whole).all().item<bool>());
  EXPECT_TRUE(torch::allclose(whole.narrow(1, 0, 9), model->forward(changed).narrow(1, 0, 9), tolerance::kFloat32Sum,
                              tolerance::kFloat32Sum));
  if (!model->supports_kv_cache()) return;
  KVCache cache;
  const auto cached = posenc::testing::logits_through_cache(model, tokens, /*prompt=*/4, cache);
  EXPECT_TRUE(torch::allclose(cached, whole, tolerance::kFloat32Model, tolerance::kFloat32Model))
      << (cached - whole).abs().max().item<double>();
}

INSTANTIATE_TEST_SUITE_P(Registry, EverySchemeWithAForgetGate, ::testing::ValuesIn(scheme_names()),
                         [](const auto& info) { return info.param; });

TEST(SchemePair, RefusedPairsSayWhy) {
  const auto has = [](const std::string& error, const std::string& fragment) {
    return error.find(fragment) != std::string::npos;
  };
  std::string e = config_error({"model.positional.type=none", "model.positional.with=fox"});
  EXPECT_TRUE(has(e, "model.positional.with=fox") && has(e, "put fox in model.positional.type")) << e;
  e = config_error({"model.positional.type=rope", "model.positional.with=learned"});
  EXPECT_TRUE(has(e, "model.positional.with=learned") && has(e, "model.positional.input")) << e;
  e = config_error({"model.positional.type=fox", "model.positional.with=fox"});
  EXPECT_TRUE(has(e, "the same scheme")) << e;
  e = config_error({"model.positional.type=rope", "model.positional.with=nonesuch"});
  EXPECT_TRUE(has(e, "model.positional.with")) << e;
  e = config_error({"model.positional.type=rope", "model.positional.with={\"type\": \"alibi\", \"slopes\": 3}"});
  EXPECT_TRUE(has(e, "model.positional.with")) << e;
  // Which hooks clash is known once the instances exist: when the model is built.
  const auto build_error = [&](const std::string& type, const std::string& with) {
    const Config cfg = posenc::testing::config_with({"model.positional.type=" + type, "model.positional.with=" + with});
    return error_of([&] { Encoder model(cfg.model, 16); });
  };
  e = build_error("rope", "xpos");
  EXPECT_TRUE(has(e, "model.positional.type=rope with model.positional.with=xpos") && has(e, "both rotate")) << e;
  e = build_error("da", "dape");
  EXPECT_TRUE(has(e, "both reweight")) << e;
  EXPECT_EQ(build_error("rope", "alibi"), "(no error)");
}

// The slot and its options survive writing the config and reading it back
// (a checkpoint stores its config so), and an encoder_decoder pairs the
// schemes in its encoder's and its decoder's self-attention.
TEST(SchemePair, TheSlotIsWrittenAndReadBackAndServesEveryModelKind) {
  const Config cfg = posenc::testing::config_with(
      {"model.positional.type=path", "model.positional.with={\"type\": \"fox\", \"bias_init\": 4.0}"});
  const json written = config_to_json(cfg);
  EXPECT_EQ(written.at("model").at("positional").at("with").at("type"), "fox");
  const Config read = config_from_json(written);
  EXPECT_EQ(read.model.positional.with, "fox");
  EXPECT_DOUBLE_EQ(read.model.positional.with_options.at("bias_init").get<double>(), 4.0);
  EXPECT_FALSE(config_to_json(posenc::testing::config_with({})).at("model").at("positional").contains("with"));

  const Config seq2seq = small_next_token_config("encoder_decoder", "alibi", {"model.positional.with=fox"});
  EncoderDecoder model(seq2seq.model, 16);
  int64_t gates = 0;
  for (const auto& p : model->named_parameters())
    if (p.key().find("with_positional.gate_bias") != std::string::npos) ++gates;
  EXPECT_EQ(gates, 2) << "one forget gate in the encoder, one in the decoder";
  model->eval();
  torch::NoGradGuard no_grad;
  const auto logits =
      model->forward(torch::randint(1, 17, {2, 9}, torch::kLong), torch::randint(1, 17, {2, 7}, torch::kLong));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
}

// RoPE's rotation with ALiBi's bias fits the fused attention kernel (LibTorch
// 2.x): it must give what the explicit scores give, and a KV cache the whole
// sequence's logits. (On LibTorch 1.13 both paths are the explicit one.)
TEST(SchemePair, ARotationWithABiasFusedEqualsExplicitAndCaches) {
  const Config cfg = small_next_token_config("decoder", "rope", {"model.positional.with=alibi"});
  auto model = posenc::testing::random_positional_model<Decoder>(cfg.model, 7);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(1, 17, {2, 14}, torch::kLong);
  const auto fused = model->forward(tokens);  // (2, 14, 18)
  model->force_explicit_attention(true);
  const auto explicit_scores = model->forward(tokens);
  model->force_explicit_attention(false);
  EXPECT_TRUE(torch::allclose(fused, explicit_scores, tolerance::kFloat32Model, tolerance::kFloat32Model))
      << (fused - explicit_scores).abs().max().item<double>();
  Config plain_cfg = small_next_token_config("decoder", "rope", {});
  Decoder rope_alone(plain_cfg.model, 16);
  copy_parameters(*model, *rope_alone);
  rope_alone->eval();
  EXPECT_FALSE(torch::allclose(fused, rope_alone->forward(tokens), tolerance::kFloat32Model, tolerance::kFloat32Model))
      << "ALiBi's bias changed nothing";
  KVCache cache;
  const auto cached = posenc::testing::logits_through_cache(model, tokens, /*prompt=*/4, cache);
  EXPECT_TRUE(torch::allclose(cached, fused, tolerance::kFloat32Model, tolerance::kFloat32Model))
      << (cached - fused).abs().max().item<double>();
}

// Beside a type that reads the ids a task defines, a scheme that can read them
// does, so its options are not made causal (ids are not in token order); in a
// decoder counting 0..L-1 they are.
TEST(SchemePair, TheSecondSchemeReadsTheTasksIdsWhereTypeDoes) {
  const auto t5_bidirectional = [](const std::vector<std::string>& task) {
    std::vector<std::string> overrides = {"model.kind=decoder", "model.positional.type=rope",
                                          "model.positional.with=t5"};
    overrides.insert(overrides.end(), task.begin(), task.end());
    return posenc::testing::config_with(overrides).model.positional.with_options.at("bidirectional").get<bool>();
  };
  EXPECT_TRUE(t5_bidirectional({"task.type=addition", "task.positions=coupled"}));
  EXPECT_FALSE(t5_bidirectional({"task.type=copy"}));
}

}  // namespace POSENC_TEST_UNIT
