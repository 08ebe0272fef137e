// The encoder classifier: permutation equivariance without positions, the two
// attention variants (shapes, gradients, parameters), placement rules.
#include <gtest/gtest.h>

#include "helpers.h"
#include "posenc/model/transformer.h"
#include "posenc/model/encoder.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::config_with;

TEST(Model, WithoutPositionsTheEncoderIsPermutationInvariant) {
  // Attention without positions is permutation-equivariant, so any pooling over
  // tokens (and the CLS token, which stays in front) is permutation-invariant:
  // the ordering task is then at chance by construction.
  torch::manual_seed(3);
  auto tokens = torch::randint(1, 65, {4, 12}, torch::kLong);
  auto perm = torch::randperm(12, torch::kLong);
  for (const char* pooling : {"max", "mean", "cls", "lse"})
    for (const char* qkv : {"projected", "embedded"}) {
      auto cfg = config_with({"model.positional.type=none", std::string("model.pooling=") + pooling,
                              std::string("model.attention.qkv=") + qkv});
      Encoder model(cfg.model, 64);
      model->eval();
      EXPECT_TRUE(torch::allclose(model->forward(tokens), model->forward(tokens.index_select(1, perm)),
                                  tolerance::kFloat32Sum, tolerance::kFloat32Sum))
          << pooling << " " << qkv;
    }
  // The same model with positions is not: the test can fail.
  Encoder rope(config_with({"model.positional.type=rope"}).model, 64);
  rope->eval();
  EXPECT_FALSE(torch::allclose(rope->forward(tokens), rope->forward(tokens.index_select(1, perm)),
                               tolerance::kFloat32Sum, tolerance::kFloat32Sum));
}

TEST(Model, EmbeddedQkvTakesQkvFromTheTokenTable) {
  auto projected_cfg = config_with({"model.attention.qkv=projected"});
  auto embedded_cfg = config_with({"model.attention.qkv=embedded"});
  Encoder projected(projected_cfg.model, 64), embedded(embedded_cfg.model, 64);
  std::map<std::string, torch::Tensor> p, e;
  for (const auto& kv : projected->named_parameters()) p[kv.key()] = kv.value();
  for (const auto& kv : embedded->named_parameters()) e[kv.key()] = kv.value();
  const int64_t D = 64, V = 66;
  EXPECT_EQ(p.at("tokens.weight").sizes(), (std::vector<int64_t>{V, D}));
  EXPECT_EQ(e.at("tokens.weight").sizes(), (std::vector<int64_t>{V, 3 * D}));
  EXPECT_EQ(e.count("blocks.0.attention.qkv.weight"), 0u);  // block 1 has no W_qkv
  EXPECT_EQ(e.count("blocks.1.attention.qkv.weight"), 1u);  // later blocks project
  int64_t np = 0, ne = 0;
  for (auto& kv : p) np += kv.second.numel();
  for (auto& kv : e) ne += kv.second.numel();
  EXPECT_EQ(ne - np, 2 * V * D - (3 * D * D + 3 * D));  // wider table, one projection fewer

  auto tokens = torch::randint(1, 65, {3, 10}, torch::kLong);
  auto logits = embedded->forward(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 2}));
  logits.sum().backward();
  // Gradients reach all three thirds (q, k, v) of the rows used.
  auto g = e.at("tokens.weight").grad().index_select(0, tokens.flatten()).abs().sum(0);  // (3D)
  for (int third = 0; third < 3; ++third) EXPECT_GT(g.narrow(0, third * D, D).sum().item<double>(), 0) << third;
}

TEST(Model, EmbeddingSchemesAreRejectedWithEmbeddedQkv) {
  auto cfg = config_with({"model.attention.qkv=embedded", "model.positional.type=sinusoidal"});
  try {
    Encoder model(cfg.model, 64);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.positional.type=sinusoidal"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.attention.qkv=embedded"), std::string::npos) << msg;
  }
  // Attention-time schemes work with it.
  Encoder ok(config_with({"model.attention.qkv=embedded", "model.positional.type=rope"}).model, 64);
}

TEST(Model, PerLayerSchemesHaveTheirOwnParameters) {
  auto count = [](const Config& c) {
    Encoder m(c.model, 16);
    int64_t n = 0;
    for (const auto& kv : m->named_parameters())
      if (kv.key().find("positional") != std::string::npos) n += kv.value().numel();
    return n;
  };
  const int64_t shared = count(config_with(
      {"model.positional.type=learned", "model.positional.max_positions=40", "model.positional.apply_to=every_layer"}));
  const int64_t per_layer =
      count(config_with({"model.positional.type=learned", "model.positional.max_positions=40",
                         "model.positional.apply_to=every_layer", "model.positional.share_across_layers=false"}));
  EXPECT_EQ(shared, 40 * 64);
  EXPECT_EQ(per_layer, 3 * 40 * 64);
}

TEST(Model, LengthChecksNameTheLimit) {
  Encoder model(
      config_with({"model.positional.type=learned", "model.positional.max_positions=17", "model.pooling=cls"}).model,
      16);
  EXPECT_NO_THROW(model->check_length(16));
  try {
    model->check_length(17);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("17 tokens needs 18 positions"), std::string::npos) << e.what();
  }
}

TEST(Model, AttentionMapsAreKeptOnRequest) {
  Encoder model(config_with({}).model, 16);
  model->eval();
  model->keep_attention(true);
  model->forward(torch::randint(1, 17, {2, 6}, torch::kLong));
  const auto maps = model->attention_maps();
  ASSERT_EQ(maps.size(), 3u);
  EXPECT_EQ(maps[0].sizes(), (std::vector<int64_t>{2, 4, 6, 6}));
  EXPECT_TRUE(torch::allclose(maps[1].sum(-1), torch::ones({2, 4, 6})));
}

}  // namespace POSENC_TEST_UNIT
