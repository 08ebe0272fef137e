// Generic tests over every registered scheme: a scheme added to the registry
// is covered here without editing this file.
#include <gtest/gtest.h>

#include "helpers.h"
#include "posenc/model/transformer.h"

using namespace posenc;

class EveryScheme : public ::testing::TestWithParam<std::string> {
 protected:
  Config config(std::initializer_list<std::string> extra = {}) {
    json j = json::object();
    apply_override(j, "model.positional.type=" + GetParam());
    apply_override(j, "model.d_model=32");
    apply_override(j, "model.heads=4");
    apply_override(j, "model.layers=2");
    apply_override(j, "model.d_ff=64");
    for (const auto& e : extra) apply_override(j, e);
    return config_from_json(j);
  }
};

TEST_P(EveryScheme, ListsDescriptionAndBuildsWithDefaults) {
  const auto& info = find_scheme(GetParam());
  EXPECT_FALSE(info.description.empty());
  for (const auto& o : info.options) EXPECT_FALSE(o.doc.empty()) << o.name;
  const auto s = posenc::testing::scheme_with(GetParam(), {32, 4, 8, 0});
  ASSERT_NE(s, nullptr);
}

TEST_P(EveryScheme, GradientsReachEveryParameter) {
  torch::manual_seed(1);
  for (const char* pooling : {"max", "cls"}) {
    EncoderClassifier model(config({std::string("model.pooling=") + pooling}).model, 16);
    auto tokens = torch::randint(1, 17, {4, 9}, torch::kLong);
    model->forward(tokens).pow(2).sum().backward();
    for (const auto& p : model->named_parameters()) {
      if (p.key().rfind("tokens", 0) == 0) continue;  // only the rows used get gradients
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key() << " pooling " << pooling;
    }
  }
}

TEST_P(EveryScheme, RunsLongerThanTrainingOrSaysWhyNot) {
  EncoderClassifier model(config().model, 16);
  model->eval();
  auto tokens = torch::randint(1, 17, {2, 300}, torch::kLong);
  try {
    model->check_length(300);
    auto logits = model->forward(tokens);
    EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("length 300"), std::string::npos) << e.what();
  }
}

TEST_P(EveryScheme, SymmetricSchemesCannotTellReversal) {
  // A scheme that is not directional leaves the encoder reversal-equivariant;
  // with max pooling the logits are then reversal-invariant.
  torch::manual_seed(2);
  EncoderClassifier model(config().model, 16);
  model->eval();
  auto tokens = torch::randint(1, 17, {3, 11}, torch::kLong);
  const bool same = torch::allclose(model->forward(tokens), model->forward(tokens.flip({1})), 1e-5, 1e-5);
  if (model->directional()) {
    EXPECT_FALSE(same) << GetParam() << " claims to be directional";
  } else {
    EXPECT_TRUE(same) << GetParam() << " claims to be symmetric";
  }
}

TEST_P(EveryScheme, SharedOrPerLayerAndEitherPlacementBuild) {
  for (const char* share : {"true", "false"})
    for (const char* where : {"input", "every_layer"}) {
      EncoderClassifier model(
          config({std::string("model.positional.share_across_layers=") + share, std::string("model.positional.apply_to=") + where})
              .model,
          16);
      auto logits = model->forward(torch::randint(1, 17, {2, 7}, torch::kLong));
      EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 2}));
    }
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryScheme, ::testing::ValuesIn(scheme_names()),
                         [](const auto& info) { return info.param; });
