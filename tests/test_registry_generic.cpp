// Generic tests over every registered scheme: a scheme added to the registry
// is covered here without editing this file.
#include <gtest/gtest.h>

#include <fstream>

#include "helpers.h"
#include "posenc/model/transformer.h"
#include "posenc/model/encoder.h"
#include "posenc/positional/inspect.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

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
  // In float64, so that a gradient that is zero in exact arithmetic (a
  // parameter the output does not depend on, such as a per-head constant that
  // the softmax cancels) reads as round-off far below the others instead of
  // passing as "non-zero". Such a parameter must be frozen (requires_grad off).
  torch::manual_seed(1);
  for (const char* pooling : {"max", "cls"}) {
    Encoder model(config({std::string("model.pooling=") + pooling}).model, 16);
    model->to(torch::kFloat64);
    auto tokens = torch::randint(1, 17, {4, 9}, torch::kLong);
    model->forward(tokens).pow(2).sum().backward();
    double largest = 0;
    for (const auto& p : model->parameters())
      if (p.grad().defined()) largest = std::max(largest, p.grad().abs().max().item<double>());
    for (const auto& p : model->named_parameters()) {
      if (!p.value().requires_grad()) continue;
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      if (p.key().rfind("tokens", 0) == 0) continue;  // only the rows used get gradients
      EXPECT_GT(p.value().grad().abs().max().item<double>(), 1e-9 * largest)
          << p.key() << " pooling " << pooling << ": its gradient is round-off, so the output does not depend on it";
    }
  }
}

TEST_P(EveryScheme, RunsLongerThanTrainingOrSaysWhyNot) {
  Encoder model(config().model, 16);
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
  Encoder model(config().model, 16);
  model->eval();
  auto tokens = torch::randint(1, 17, {3, 11}, torch::kLong);
  const bool same = torch::allclose(model->forward(tokens), model->forward(tokens.flip({1})), tolerance::kFloat32Sum,
                                    tolerance::kFloat32Sum);
  if (model->directional()) {
    EXPECT_FALSE(same) << GetParam() << " claims to be directional";
  } else {
    EXPECT_TRUE(same) << GetParam() << " claims to be symmetric";
  }
}

TEST_P(EveryScheme, SharedOrPerLayerAndEitherPlacementBuild) {
  for (const char* share : {"true", "false"})
    for (const char* where : {"input", "every_layer"}) {
      Encoder model(config({std::string("model.positional.share_across_layers=") + share,
                            std::string("model.positional.apply_to=") + where})
                        .model,
                    16);
      auto logits = model->forward(torch::randint(1, 17, {2, 7}, torch::kLong));
      EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 2}));
    }
}

TEST_P(EveryScheme, BiasDependsOnlyOnOffset) {
  // Every bias scheme: b[h, i, j] = g_h(j - i) (a Toeplitz matrix per head), and for
  // schemes that are not directional g_h(d) = g_h(-d).
  auto s = posenc::testing::scheme_with(GetParam(), {32, 4, 8, 0});
  if (!s->capabilities().bias) GTEST_SKIP() << "no bias hook";
  if (!s->offset_only()) GTEST_SKIP() << "its bias also depends on the query position (its own tests cover it)";
  torch::manual_seed(6);
  for (auto& p : s->parameters()) p.data().normal_();
  auto b = s->bias(posenc::testing::arange_positions(12))[0];  // (H, 12, 12)
  EXPECT_TRUE(torch::allclose(b.narrow(1, 0, 11).narrow(2, 0, 11), b.narrow(1, 1, 11).narrow(2, 1, 11)));
  // Shifting every position by the same amount changes nothing (APE's L stays 12).
  auto ids = torch::arange(30, 42, torch::kLong);
  EXPECT_TRUE(torch::allclose(s->bias(Positions{ids, ids, 42, nullptr})[0], b, tolerance::kFloat32Sum,
                              tolerance::kFloat32Value));
  if (!s->directional()) {
    EXPECT_TRUE(torch::allclose(b, b.transpose(-1, -2)));
  } else {
    EXPECT_FALSE(torch::allclose(b, b.transpose(-1, -2)));
  }
}

TEST_P(EveryScheme, WhatInspectShowsOfTheScoresDependsOnlyOnOffset) {
  // inspect's (H, L, L) matrices (a bias, the score terms of an all-ones query
  // and key, the value terms of one key, reweighted scores of 1) are Toeplitz for a scheme that claims to
  // depend on j - i alone, and symmetric for one that cannot tell left from
  // right: what a user sees in `posenc inspect` is the property the scheme claims.
  const auto& info = find_scheme(GetParam());
  auto s = posenc::testing::scheme_with(GetParam(), {32, 4, 8, 0});
  const Capabilities caps = s->capabilities();
  if (!(caps.bias || caps.score_terms || caps.value_terms || caps.reweight))
    GTEST_SKIP() << "it adds nothing to the scores or the values";
  if (!s->offset_only())
    GTEST_SKIP() << "it also depends on the query position or the content (its own tests cover it)";
  torch::manual_seed(7);
  for (auto& p : s->parameters()) p.data().normal_(0.0, 0.5);
  const auto out = describe_scheme(*s, info, resolve_scheme_options(info, json::object(), "test"), /*length=*/12,
                                   /*heads=*/4, /*dim=*/32, /*rotate_dim=*/32, /*seed=*/0);
  for (const char* key : kPairMatrixKeys) {
    if (!out.contains(key)) continue;
    const auto m = posenc::testing::tensor_of(out[key]);  // (H, 12, 12)
    // float64 copies of float32 values computed per pair: equal along a diagonal up to float32 rounding.
    const double scale = m.abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(m.narrow(1, 0, 11).narrow(2, 0, 11), m.narrow(1, 1, 11).narrow(2, 1, 11), 0,
                                tolerance::kFloat32Sum * std::max(1.0, scale)))
        << GetParam() << " " << key << " is not constant along its diagonals";
    if (!s->directional()) {
      EXPECT_TRUE(torch::allclose(m, m.transpose(-1, -2), 0, tolerance::kFloat32Sum * std::max(1.0, scale)))
          << GetParam() << " " << key << " tells left from right";
    }
  }
}

TEST_P(EveryScheme, BiasIsContiguousAlongTheKeys) {
  // The fused attention kernels (memory-efficient, cuDNN) read a bias whose
  // last dimension is contiguous; given another layout, SDPA falls back to its
  // float32 math kernel (T5's bias, a movedim of its table's rows, ran there:
  // docs/gpu/gpu-report-2026-11-27-h200.md).
  auto s = posenc::testing::scheme_with(GetParam(), {32, 4, 8, 0});
  if (!s->capabilities().bias) GTEST_SKIP() << "no bias hook";
  const auto b = s->bias(posenc::testing::arange_positions(12));  // (1 or B, H, 12, 12)
  EXPECT_EQ(b.stride(-1), 1) << "strides " << b.strides();
}

TEST_P(EveryScheme, HasARowInTheReadmesSchemeTable) {
  std::ifstream readme(std::string(POSENC_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(readme.good());
  const std::string row = "| `" + GetParam() + "` |";
  bool found = false;
  for (std::string line; std::getline(readme, line);) found = found || line.rfind(row, 0) == 0;
  EXPECT_TRUE(found) << "README.md has no row starting with " << row << " in its table of positional schemes";
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryScheme, ::testing::ValuesIn(scheme_names()),
                         [](const auto& info) { return info.param; });

}  // namespace POSENC_TEST_UNIT
