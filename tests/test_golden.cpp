// The C++ schemes against golden values from an independent numpy
// implementation (scripts/golden.py -> tests/golden/*.json).
#include <gtest/gtest.h>

#include "helpers.h"
#include "posenc/positional/inspect.h"
#include "posenc/positional/relative_offsets.h"
#include "posenc/positional/tables.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

json golden(const std::string& name) {
  return read_json_file(std::string(POSENC_SOURCE_DIR) + "/tests/golden/" + name + ".json");
}

// The fixture's "cases", by value. `for (c : golden(n)["cases"])` iterates a
// reference into a temporary destroyed before the loop's first pass: built
// that way, these tests ran no case at all from 2026-11-21 to 11-27, and
// passed. A fixture without cases fails here for the same reason.
json cases_of(const json& fixture, const std::string& name) {
  json cases = fixture.at("cases");
  EXPECT_FALSE(cases.empty()) << "tests/golden/" << name << ".json has no cases";
  return cases;
}

json golden_cases(const std::string& name) { return cases_of(golden(name), name); }

}  // namespace

TEST(Golden, SinusoidalTables) {
  for (const auto& c : golden_cases("sinusoidal")) {
    InspectRequest r{"sinusoidal", c["length"], 1, c["dim"], {{"base", c["base"]}, {"layout", c["layout"]}}};
    const auto got = posenc::testing::tensor_of(inspect_scheme(r)["embedding"]);
    EXPECT_TRUE(torch::allclose(got, posenc::testing::tensor_of(c["table"]), tolerance::kFloat32Value,
                                tolerance::kFloat32Value))
        << c["layout"] << " dim " << c["dim"];
  }
}

TEST(Golden, RopeRotations) {
  for (const auto& c : golden_cases("rope")) {
    const int64_t L = c["length"], Dh = c["head_dim"];
    auto rope = posenc::testing::scheme_with(
        "rope", {Dh, 1, Dh, 0}, {{"base", c["base"]}, {"layout", c["layout"]}, {"fraction", c["fraction"]}});
    auto q = posenc::testing::tensor_of(c["input"]).view({1, 1, L, Dh}), k = q.clone();
    rope->rotate(q, k, posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(q[0][0], posenc::testing::tensor_of(c["output"]), tolerance::kFloat32Value,
                                tolerance::kFloat32Value))
        << c["layout"] << " fraction " << c["fraction"] << " base " << c["base"];
  }
}

TEST(Golden, AlibiSlopesAndBias) {
  for (const auto& c : golden_cases("alibi")) {
    const int64_t H = c["heads"];
    const auto slopes = alibi_slopes(H);
    const auto expected = c["slopes"].get<std::vector<double>>();
    ASSERT_EQ(slopes.size(), expected.size());
    for (size_t h = 0; h < slopes.size(); ++h)
      EXPECT_NEAR(slopes[h], expected[h], tolerance::kFloat64Closed) << H << " heads";
    InspectRequest r{"alibi", c["length"], H, 8 * H};
    EXPECT_TRUE(torch::allclose(posenc::testing::tensor_of(inspect_scheme(r)["bias"]),
                                posenc::testing::tensor_of(c["bias"]), tolerance::kFloat32Value,
                                tolerance::kFloat32Value))
        << H;
  }
}

TEST(Golden, T5Buckets) {
  const auto g = golden("t5");
  auto offsets = torch::tensor(g["offsets"].get<std::vector<int64_t>>(), torch::kLong);
  for (const auto& c : cases_of(g, "t5")) {
    auto got = t5_buckets(offsets, c["num_buckets"], c["max_distance"], c["bidirectional"]);
    auto want = torch::tensor(c["buckets"].get<std::vector<int64_t>>(), torch::kLong);
    EXPECT_TRUE(torch::equal(got, want)) << c["num_buckets"] << " buckets, bidirectional " << c["bidirectional"];
  }
}

namespace {

/// The bias (H, L, L) of a scheme built with `options`, its named parameters set from `values`.
torch::Tensor bias_with(const std::string& type, int64_t heads, int64_t head_dim, int64_t length, const json& options,
                        const std::map<std::string, json>& values = {}) {
  auto s = posenc::testing::scheme_with(type, {heads * head_dim, heads, head_dim, 0}, options);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : s->named_parameters())
      if (values.count(p.key())) p.value().copy_(posenc::testing::tensor_of(values.at(p.key())).to(torch::kFloat32));
  }
  return s->bias(posenc::testing::arange_positions(length))[0].to(torch::kFloat64);
}

}  // namespace

TEST(Golden, KerpleLogAndPower) {
  for (const auto& c : golden_cases("kerple")) {
    const int64_t H = c["r1"].size();
    const auto got =
        bias_with("kerple", H, 4, c["length"], {{"variant", c["variant"]}}, {{"r1", c["r1"]}, {"r2", c["r2"]}});
    EXPECT_TRUE(
        torch::allclose(got, posenc::testing::tensor_of(c["bias"]), tolerance::kFloat32Sum, tolerance::kFloat32Sum))
        << c["variant"];
  }
}

TEST(Golden, SandwichBias) {
  for (const auto& c : golden_cases("sandwich")) {
    const auto got = bias_with("sandwich", c["heads"], c["head_dim"], c["length"], {{"base", c["base"]}});
    EXPECT_TRUE(
        torch::allclose(got, posenc::testing::tensor_of(c["bias"]), tolerance::kFloat32Sum, tolerance::kFloat32Sum))
        << c["heads"] << " heads, base " << c["base"];
  }
}

TEST(Golden, RopeScalingModesAndPRope) {
  for (const auto& c : golden_cases("rope_scaling")) {
    const int64_t L = c["length"], Dh = c["head_dim"];
    json options = {
        {"base", c["base"]}, {"scaling", c["scaling"]}, {"drop_low_frequencies", c["drop_low_frequencies"]}};
    if (c["scaling"] != "none") {  // posenc refuses them without a scaling; the reference ignores them
      options["factor"] = c["factor"];
      options["original_max_position"] = c["original_max_position"];
    }
    auto rope = posenc::testing::scheme_with("rope", {Dh, 1, Dh, 0}, options);
    auto q = posenc::testing::tensor_of(c["input"]).view({1, 1, L, Dh}), k = q.clone();
    rope->rotate(q, k, posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(q[0][0], posenc::testing::tensor_of(c["output"]), tolerance::kFloat32Value,
                                tolerance::kFloat32Value))
        << c["scaling"];
  }
}

TEST(Golden, XposScalesQueriesAndKeys) {
  for (const auto& c : golden_cases("xpos")) {
    const int64_t L = c["length"], Dh = c["head_dim"];
    auto xpos = posenc::testing::scheme_with(
        "xpos", {Dh, 1, Dh, 0},
        {{"base", c["base"]}, {"layout", c["layout"]}, {"gamma", c["gamma"]}, {"scale_base", c["scale_base"]}});
    auto q = posenc::testing::tensor_of(c["input"]).view({1, 1, L, Dh}), k = q.clone();
    xpos->rotate(q, k, posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(q[0][0], posenc::testing::tensor_of(c["q"]), tolerance::kFloat32Value,
                                tolerance::kFloat32Value))
        << c["layout"];
    EXPECT_TRUE(torch::allclose(k[0][0], posenc::testing::tensor_of(c["k"]), tolerance::kFloat32Value,
                                tolerance::kFloat32Value))
        << c["layout"];
  }
}

TEST(Golden, FireWithFixedWeights) {
  for (const auto& c : golden_cases("fire")) {
    const int64_t H = c["b2"].size(), hidden = c["b1"].size();
    const auto got = bias_with("fire", H, 4, c["length"], {{"hidden", hidden}},
                               {{"hidden.weight", c["w1"]},
                                {"hidden.bias", c["b1"]},
                                {"out.weight", c["w2"]},
                                {"out.bias", c["b2"]},
                                {"c", c["c"]},
                                {"threshold", c["threshold"]}});
    EXPECT_TRUE(
        torch::allclose(got, posenc::testing::tensor_of(c["bias"]), tolerance::kFloat32Sum, tolerance::kFloat32Sum));
  }
}

TEST(Golden, CopeWithFixedQueriesKeysAndTable) {
  for (const auto& c : golden_cases("cope")) {
    const int64_t H = c["heads"], L = c["length"], Dh = c["head_dim"];
    auto cope = posenc::testing::scheme_with("cope", {H * Dh, H, Dh, 0}, {{"max_count", c["max_count"]}});
    cope->to(torch::kFloat64);
    cope->named_parameters()["table"].data().copy_(posenc::testing::tensor_of(c["table"]));
    auto q = posenc::testing::tensor_of(c["q"]).unsqueeze(0),
         k = posenc::testing::tensor_of(c["k"]).unsqueeze(0);  // (1, H, L, Dh)
    auto terms = cope->score_terms(q, k, torch::matmul(q, k.transpose(-2, -1)), posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(terms[0], posenc::testing::tensor_of(c["terms"]), tolerance::kFloat32Sum,
                                tolerance::kFloat32Value));
  }
}

TEST(Golden, FoxWithFixedKeysAndGates) {
  for (const auto& c : golden_cases("fox")) {
    const int64_t H = c["heads"], L = c["length"], Dh = c["head_dim"];
    const std::string gate = c["gate"];
    auto fox = posenc::testing::scheme_with("fox", {H * Dh, H, Dh, 0}, {{"gate", gate}});
    fox->to(torch::kFloat64);
    auto params = fox->named_parameters();
    params["gate_bias"].data().copy_(posenc::testing::tensor_of(c["gate_bias"]));
    if (gate == "content") params["gate_weight"].data().copy_(posenc::testing::tensor_of(c["gate_weight"]));
    auto k = posenc::testing::tensor_of(c["k"]).unsqueeze(0);     // (1, H, L, Dh)
    auto q = torch::randn({1, H, L, Dh}, torch::kFloat64);        // the gates never read the queries
    const auto expected = posenc::testing::tensor_of(c["bias"]);  // (H, L, L), the paper's D, added after the scale
    auto terms = fox->score_terms(q, k, torch::matmul(q, k.transpose(-2, -1)), posenc::testing::arange_positions(L));
    EXPECT_TRUE(
        torch::allclose(terms[0] / std::sqrt(double(Dh)), expected, tolerance::kFloat32Sum, tolerance::kFloat32Sum));
    // A decoding step: the last three queries over every key, as from a KV cache.
    auto last = fox->score_terms(q.narrow(2, L - 3, 3), k, torch::Tensor(), posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(last[0] / std::sqrt(double(Dh)), expected.narrow(1, L - 3, 3), tolerance::kFloat32Sum,
                                tolerance::kFloat32Sum));
  }
}

TEST(Golden, PathWithFixedKeysAndSteps) {
  for (const auto& c : golden_cases("path")) {
    const int64_t H = c["heads"], L = c["length"], Dh = c["head_dim"];
    const bool causal = c["causal"];
    auto path = posenc::testing::scheme_with("path", {H * Dh, H, Dh, 0, causal});
    path->to(torch::kFloat64);
    auto params = path->named_parameters();
    for (const char* name : {"transform", "beta_weight", "beta_bias"})
      params[name].data().copy_(posenc::testing::tensor_of(c[name]));
    auto q = posenc::testing::tensor_of(c["q"]).unsqueeze(0),
         k = posenc::testing::tensor_of(c["k"]).unsqueeze(0);       // (1, H, L, Dh)
    const auto expected = posenc::testing::tensor_of(c["logits"]);  // (H, L, L), before the 1/sqrt(Dh) scale
    auto qk = torch::matmul(q, k.transpose(-2, -1));
    auto logits = qk + path->score_terms(q, k, qk, posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(logits[0], expected, tolerance::kFloat64, tolerance::kFloat64));
    // A decoding step: the last three queries over every key, as from a KV cache.
    auto last = qk.narrow(2, L - 3, 3) +
                path->score_terms(q.narrow(2, L - 3, 3), k, torch::Tensor(), posenc::testing::arange_positions(L));
    EXPECT_TRUE(torch::allclose(last[0], expected.narrow(1, L - 3, 3), tolerance::kFloat64, tolerance::kFloat64));
  }
}

// ---- Schemes with trained parameters: every parameter set from the fixture, in float64. ----

namespace {

json golden_case_value(const json& c, const std::string& key) { return c.contains(key) ? c[key] : json(); }

/// A scheme built with `options`, moved to float64, each parameter or buffer
/// named in `values` set from the fixture. Setting a value the options also
/// gave keeps it exact: an option is stored at the model's float32 first, and
/// 0.7 read back from float32 is 0.7 + 1.2e-8, beyond the float64 tolerance.
PositionalScheme scheme_with_values(const std::string& type, const SchemeContext& ctx, const json& options,
                                    const std::map<std::string, json>& values) {
  auto s = posenc::testing::scheme_with(type, ctx, options);
  s->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  auto params = s->named_parameters();
  auto buffers = s->named_buffers();
  for (const auto& [name, value] : values) {
    if (value.is_null()) continue;
    const bool found = params.contains(name) || buffers.contains(name);
    EXPECT_TRUE(found) << type << " has no parameter or buffer " << name;
    if (!found) continue;
    auto target = params.contains(name) ? params[name] : buffers[name];
    target.copy_(posenc::testing::tensor_of(value).view(target.sizes()));
  }
  return s;
}

}  // namespace

TEST(Golden, LearnedTableAndItsScaledVariant) {
  for (const auto& c : golden_cases("learned")) {
    const int64_t L = c["length"], D = c["d_model"];
    const bool scaled = c.value("scaled", false);
    auto s = scheme_with_values("learned", {D, 1, D, 0}, {{"max_positions", c["max_positions"]}, {"scaled", scaled}},
                                {{"table", c["table"]}, {"scale", golden_case_value(c, "scale")}});
    auto out =
        s->embed(posenc::testing::tensor_of(c["x"]).unsqueeze(0), posenc::testing::arange_positions(L));  // (1, L, D)
    EXPECT_TRUE(
        torch::allclose(out[0], posenc::testing::tensor_of(c["output"]), tolerance::kFloat64, tolerance::kFloat64))
        << "scaled " << scaled;
  }
}

TEST(Golden, DynamicGatedSinusoids) {
  for (const auto& c : golden_cases("dynamic")) {
    const int64_t L = c["length"], D = c["d_model"];
    auto s = scheme_with_values("dynamic", {D, 1, D, 0}, {{"max_length", c["max_length"]}},
                                {{"content_scale", c["content_scale"]},
                                 {"position_scale", c["position_scale"]},
                                 {"gate_in.weight", c["w1"]},
                                 {"gate_in.bias", c["b1"]},
                                 {"gate_out.weight", c["w2"]},
                                 {"gate_out.bias", c["b2"]},
                                 {"content_factor", json::array({c["content_factor"]})},
                                 {"length_factor", json::array({c["length_factor"]})}});
    auto out =
        s->embed(posenc::testing::tensor_of(c["x"]).unsqueeze(0), posenc::testing::arange_positions(L));  // (1, L, D)
    EXPECT_TRUE(
        torch::allclose(out[0], posenc::testing::tensor_of(c["output"]), tolerance::kFloat64, tolerance::kFloat64));
  }
}

TEST(Golden, ShawKeyAndValueTerms) {
  for (const auto& c : golden_cases("shaw")) {
    const int64_t H = c["heads"], L = c["length"], Dh = c["head_dim"];
    const bool head_scales = c.value("head_scales", false);
    auto s = scheme_with_values("shaw", {H * Dh, H, Dh, 0},
                                {{"max_distance", c["max_distance"]}, {"head_scales", head_scales}},
                                {{"keys", c["keys"]},
                                 {"values", c["values"]},
                                 {"content_scale", golden_case_value(c, "content_scale")},
                                 {"position_scale", golden_case_value(c, "position_scale")}});
    const auto pos = posenc::testing::arange_positions(L);
    auto q = posenc::testing::tensor_of(c["q"]).unsqueeze(0),
         k = posenc::testing::tensor_of(c["k"]).unsqueeze(0);  // (1, H, L, Dh)
    auto terms = s->score_terms(q, k, torch::matmul(q, k.transpose(-2, -1)), pos);
    EXPECT_TRUE(
        torch::allclose(terms[0], posenc::testing::tensor_of(c["terms"]), tolerance::kFloat64, tolerance::kFloat64))
        << "head_scales " << head_scales;
    auto values = s->value_terms(posenc::testing::tensor_of(c["probs"]).unsqueeze(0), pos);
    EXPECT_TRUE(torch::allclose(values[0], posenc::testing::tensor_of(c["value_terms"]), tolerance::kFloat64,
                                tolerance::kFloat64));
  }
}

TEST(Golden, TransformerXlScoreTerms) {
  for (const auto& c : golden_cases("xl")) {
    const int64_t H = c["heads"], L = c["length"], Dh = c["head_dim"];
    auto s = scheme_with_values("xl", {H * Dh, H, Dh, 0}, {{"base", c["base"]}},
                                {{"u", c["u"]}, {"v", c["v"]}, {"w_r.weight", c["w_r"]}});
    auto q = posenc::testing::tensor_of(c["q"]).unsqueeze(0),
         k = posenc::testing::tensor_of(c["k"]).unsqueeze(0);  // (1, H, L, Dh)
    auto terms = s->score_terms(q, k, torch::matmul(q, k.transpose(-2, -1)), posenc::testing::arange_positions(L));
    EXPECT_TRUE(
        torch::allclose(terms[0], posenc::testing::tensor_of(c["terms"]), tolerance::kFloat64, tolerance::kFloat64));
  }
}

TEST(Golden, ApeAndDecayBiasesWithAndWithoutDirection) {
  for (const std::string type : {"ape", "decay"}) {
    const std::string knob = type == "ape" ? "scale" : "tau";
    for (const auto& c : golden_cases(type)) {
      const int64_t H = c["heads"], L = c["length"];
      const bool directional = c.value("directional", false);
      // The scale, or log tau, set again in float64 (scheme_with_values says why).
      const double knob_value = c[knob];
      const auto stored = type == "ape" ? std::pair{"scale", knob_value} : std::pair{"log_tau", std::log(knob_value)};
      auto s = scheme_with_values(type, {H * 4, H, 4, 0}, {{knob, knob_value}, {"directional", directional}},
                                  {{stored.first, stored.second},
                                   {"left_offset", golden_case_value(c, "left_offset")},
                                   {"right_offset", golden_case_value(c, "right_offset")}});
      auto bias = s->bias(posenc::testing::arange_positions(L));  // (1, H or 1, L, L)
      EXPECT_TRUE(torch::allclose(bias[0].expand({H, L, L}), posenc::testing::tensor_of(c["bias"]), tolerance::kFloat64,
                                  tolerance::kFloat64))
          << type << " directional " << directional;
    }
  }
}

TEST(Golden, DaReweightsTheScores) {
  for (const auto& c : golden_cases("da")) {
    const int64_t H = c["heads"], L = c["length"];
    auto s = scheme_with_values("da", {H * 4, H, 4, 0}, json::object(), {{"w", c["w"]}, {"v", c["v"]}});
    auto out = s->reweight(posenc::testing::tensor_of(c["scores"]).unsqueeze(0), posenc::testing::arange_positions(L));
    EXPECT_TRUE(
        torch::allclose(out[0], posenc::testing::tensor_of(c["output"]), tolerance::kFloat64, tolerance::kFloat64));
  }
}

TEST(Golden, DapeRefinesAKerpleBiasWithAnMlpOfTheScores) {
  for (const auto& c : golden_cases("dape")) {
    const int64_t H = c["heads"], L = c["length"];
    auto s = scheme_with_values("dape", {H * 4, H, 4, 0}, {{"hidden", c["hidden"]}},
                                {{"r1", c["r1"]},
                                 {"r2", c["r2"]},
                                 {"hidden.weight", c["w1"]},
                                 {"hidden.bias", c["b1"]},
                                 {"out.weight", c["w2"]}});
    auto out = s->reweight(posenc::testing::tensor_of(c["scores"]).unsqueeze(0), posenc::testing::arange_positions(L));
    EXPECT_TRUE(
        torch::allclose(out[0], posenc::testing::tensor_of(c["output"]), tolerance::kFloat64, tolerance::kFloat64));
  }
}

TEST(Golden, EverySchemeThatComputesSomethingHasAFixture) {
  // A scheme with any hook (embed, rotate, bias, score or value terms, reweighting) must be checked
  // against scripts/golden.py; only "none", which computes nothing, is exempt.
  for (const auto& name : scheme_names()) {
    const auto caps = posenc::testing::scheme_with(name, {8, 2, 4, 0})->capabilities();
    if (!caps.embed && !caps.acts_in_attention()) continue;
    EXPECT_TRUE(std::filesystem::exists(std::string(POSENC_SOURCE_DIR) + "/tests/golden/" + name + ".json"))
        << name << " has no golden fixture: add its formula to scripts/golden.py and a test in tests/test_golden.cpp";
  }
}

}  // namespace POSENC_TEST_UNIT
