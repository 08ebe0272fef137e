// The C++ schemes against golden values from an independent numpy
// implementation (scripts/golden.py -> tests/golden/*.json).
#include <gtest/gtest.h>

#include "helpers.h"
#include "posenc/positional/inspect.h"
#include "posenc/positional/relative.h"
#include "posenc/positional/tables.h"

using namespace posenc;

namespace {

json golden(const std::string& name) {
  return read_json_file(std::string(POSENC_SOURCE_DIR) + "/tests/golden/" + name + ".json");
}

torch::Tensor tensor_of(const json& nested) {
  std::vector<double> flat;
  std::vector<int64_t> shape;
  const json* level = &nested;
  while (level->is_array()) {
    shape.push_back(static_cast<int64_t>(level->size()));
    level = &(*level)[0];
  }
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_array())
      for (const auto& e : j) walk(e);
    else
      flat.push_back(j.get<double>());
  };
  walk(nested);
  return torch::tensor(flat, torch::kFloat64).view(shape);
}

}  // namespace

TEST(Golden, SinusoidalTables) {
  for (const auto& c : golden("sinusoidal")["cases"]) {
    InspectRequest r{"sinusoidal", c["length"], 1, c["dim"], {{"base", c["base"]}, {"layout", c["layout"]}}};
    const auto got = tensor_of(inspect_scheme(r)["embedding"]);
    EXPECT_TRUE(torch::allclose(got, tensor_of(c["table"]), 1e-6, 1e-6)) << c["layout"] << " dim " << c["dim"];
  }
}

TEST(Golden, RopeRotations) {
  for (const auto& c : golden("rope")["cases"]) {
    const int64_t L = c["length"], Dh = c["head_dim"];
    auto rope = posenc::testing::scheme_with(
        "rope", {Dh, 1, Dh, 0}, {{"base", c["base"]}, {"layout", c["layout"]}, {"fraction", c["fraction"]}});
    auto q = tensor_of(c["input"]).view({1, 1, L, Dh}), k = q.clone();
    rope->rotate(q, k, posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(q[0][0], tensor_of(c["output"]), 1e-6, 1e-6))
        << c["layout"] << " fraction " << c["fraction"] << " base " << c["base"];
  }
}

TEST(Golden, AlibiSlopesAndBias) {
  for (const auto& c : golden("alibi")["cases"]) {
    const int64_t H = c["heads"];
    const auto slopes = alibi_slopes(H);
    const auto expected = c["slopes"].get<std::vector<double>>();
    ASSERT_EQ(slopes.size(), expected.size());
    for (size_t h = 0; h < slopes.size(); ++h) EXPECT_NEAR(slopes[h], expected[h], 1e-12) << H << " heads";
    InspectRequest r{"alibi", c["length"], H, 8 * H};
    EXPECT_TRUE(torch::allclose(tensor_of(inspect_scheme(r)["bias"]), tensor_of(c["bias"]), 1e-6, 1e-6)) << H;
  }
}

TEST(Golden, T5Buckets) {
  const auto g = golden("t5");
  auto offsets = torch::tensor(g["offsets"].get<std::vector<int64_t>>(), torch::kLong);
  for (const auto& c : g["cases"]) {
    auto got = t5_buckets(offsets, c["num_buckets"], c["max_distance"], c["bidirectional"]);
    auto want = torch::tensor(c["buckets"].get<std::vector<int64_t>>(), torch::kLong);
    EXPECT_TRUE(torch::equal(got, want)) << c["num_buckets"] << " buckets, bidirectional " << c["bidirectional"];
  }
}

TEST(Inspect, ReportsWhatEachSchemeContributes) {
  for (const auto& name : scheme_names()) {
    const auto out = inspect_scheme({name, 7, 2, 8});
    const auto caps = posenc::testing::scheme_with(name, {8, 2, 4, 0})->capabilities();
    EXPECT_EQ(out.contains("embedding"), caps.embed) << name;
    EXPECT_EQ(out.contains("bias"), caps.bias) << name;
    EXPECT_EQ(out.contains("rotated_ones"), caps.rotate) << name;
    if (caps.bias) {
      EXPECT_EQ(out["bias"].size(), 2u);
      EXPECT_EQ(out["bias"][0].size(), 7u);
    }
    if (caps.embed) {
      EXPECT_EQ(out["embedding"][6].size(), 8u) << name;
    }
  }
  EXPECT_THROW(inspect_scheme({"rope", 7, 3, 8}), ConfigError);
  EXPECT_THROW(inspect_scheme({"rope", 7, 2, 8, {{"bogus", 1}}}), ConfigError);
}

namespace {

/// The bias (H, L, L) of a scheme built with `options`, its named parameters set from `values`.
torch::Tensor bias_with(const std::string& type, int64_t heads, int64_t head_dim, int64_t length, const json& options,
                        const std::map<std::string, json>& values = {}) {
  auto s = posenc::testing::scheme_with(type, {heads * head_dim, heads, head_dim, 0}, options);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : s->named_parameters())
      if (values.count(p.key())) p.value().copy_(tensor_of(values.at(p.key())).to(torch::kFloat32));
  }
  return s->bias(posenc::testing::arange_positions(length))[0].to(torch::kFloat64);
}

}  // namespace

TEST(Golden, KerpleLogAndPower) {
  for (const auto& c : golden("kerple")["cases"]) {
    const int64_t H = c["r1"].size();
    const auto got =
        bias_with("kerple", H, 4, c["length"], {{"variant", c["variant"]}}, {{"r1", c["r1"]}, {"r2", c["r2"]}});
    EXPECT_TRUE(torch::allclose(got, tensor_of(c["bias"]), 1e-5, 1e-5)) << c["variant"];
  }
}

TEST(Golden, SandwichBias) {
  for (const auto& c : golden("sandwich")["cases"]) {
    const auto got = bias_with("sandwich", c["heads"], c["head_dim"], c["length"], {{"base", c["base"]}});
    EXPECT_TRUE(torch::allclose(got, tensor_of(c["bias"]), 1e-5, 1e-5)) << c["heads"] << " heads, base " << c["base"];
  }
}

TEST(Golden, RopeScalingModesAndPRope) {
  for (const auto& c : golden("rope_scaling")["cases"]) {
    const int64_t L = c["length"], Dh = c["head_dim"];
    auto rope = posenc::testing::scheme_with("rope", {Dh, 1, Dh, 0},
                                             {{"base", c["base"]},
                                              {"scaling", c["scaling"]},
                                              {"factor", c["factor"]},
                                              {"original_max_position", c["original_max_position"]},
                                              {"drop_low_frequencies", c["drop_low_frequencies"]}});
    auto q = tensor_of(c["input"]).view({1, 1, L, Dh}), k = q.clone();
    rope->rotate(q, k, posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(q[0][0], tensor_of(c["output"]), 1e-6, 1e-6)) << c["scaling"];
  }
}

TEST(Golden, XposScalesQueriesAndKeys) {
  for (const auto& c : golden("xpos")["cases"]) {
    const int64_t L = c["length"], Dh = c["head_dim"];
    auto xpos = posenc::testing::scheme_with(
        "xpos", {Dh, 1, Dh, 0},
        {{"base", c["base"]}, {"layout", c["layout"]}, {"gamma", c["gamma"]}, {"scale_base", c["scale_base"]}});
    auto q = tensor_of(c["input"]).view({1, 1, L, Dh}), k = q.clone();
    xpos->rotate(q, k, posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(q[0][0], tensor_of(c["q"]), 1e-6, 1e-6)) << c["layout"];
    EXPECT_TRUE(torch::allclose(k[0][0], tensor_of(c["k"]), 1e-6, 1e-6)) << c["layout"];
  }
}

TEST(Golden, FireWithFixedWeights) {
  for (const auto& c : golden("fire")["cases"]) {
    const int64_t H = c["b2"].size(), hidden = c["b1"].size();
    const auto got = bias_with("fire", H, 4, c["length"], {{"hidden", hidden}},
                               {{"hidden.weight", c["w1"]},
                                {"hidden.bias", c["b1"]},
                                {"out.weight", c["w2"]},
                                {"out.bias", c["b2"]},
                                {"c", c["c"]},
                                {"threshold", c["threshold"]}});
    EXPECT_TRUE(torch::allclose(got, tensor_of(c["bias"]), 1e-5, 1e-5));
  }
}

TEST(Golden, CopeWithFixedQueriesKeysAndTable) {
  for (const auto& c : golden("cope")["cases"]) {
    const int64_t H = c["heads"], L = c["length"], Dh = c["head_dim"];
    auto cope = posenc::testing::scheme_with("cope", {H * Dh, H, Dh, 0}, {{"max_count", c["max_count"]}});
    cope->to(torch::kFloat64);
    cope->named_parameters()["table"].data().copy_(tensor_of(c["table"]));
    auto q = tensor_of(c["q"]).unsqueeze(0), k = tensor_of(c["k"]).unsqueeze(0);  // (1, H, L, Dh)
    auto terms = cope->score_terms(q, k, torch::matmul(q, k.transpose(-2, -1)), posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(terms[0], tensor_of(c["terms"]), 1e-5, 1e-6));
  }
}
