// What `posenc inspect` reports of each scheme at initialization (inspect.cpp).
#include <gtest/gtest.h>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/analysis/trained.h"
#include "posenc/model/transformer.h"
#include "posenc/positional/registry.h"
#include "posenc/train/checkpoint.h"
#include "posenc/positional/inspect.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

TEST(Inspect, ReportsWhatEachSchemeContributes) {
  for (const auto& name : scheme_names()) {
    const auto out = inspect_scheme({name, 7, 2, 8});
    const auto caps = posenc::testing::scheme_with(name, {8, 2, 4, 0})->capabilities();
    EXPECT_EQ(out.contains("embedding"), caps.embed) << name;
    EXPECT_EQ(out.contains("bias"), caps.bias) << name;
    EXPECT_EQ(out.contains("rotated_ones"), caps.rotate) << name;
    EXPECT_EQ(out.contains("score_terms_of_ones"), caps.score_terms) << name;
    EXPECT_EQ(out.contains("value_terms_of_ones"), caps.value_terms) << name;
    EXPECT_EQ(out.contains("reweighted_ones"), caps.reweight) << name;
    for (const char* key : kPairMatrixKeys)
      if (out.contains(key)) {  // (H, L, L)
        EXPECT_EQ(out[key].size(), 2u) << name << " " << key;
        EXPECT_EQ(out[key][0].size(), 7u) << name << " " << key;
        EXPECT_EQ(out[key][0][6].size(), 7u) << name << " " << key;
      }
    if (caps.embed) {
      EXPECT_EQ(out["embedding"][6].size(), 8u) << name;
    }
  }
  EXPECT_THROW(inspect_scheme({"rope", 7, 3, 8}), ConfigError);
  EXPECT_THROW(inspect_scheme({"rope", 7, 2, 8, {{"bogus", 1}}}), ConfigError);
}

TEST(Inspect, ShawsValueTermsAreTheSumOfItsValueVectorAtEachClippedOffset) {
  // Written from the definition (Shaw et al. 2018: z_i += sum_j a_ij a^V_clip(j-i)):
  // with all of query i's weight on key j, the output gains a^V_clip(j-i), whose
  // all-ones read-out is the sum of that row of the table, in every head.
  const int64_t L = 9, H = 2, D = 8, k = 3;
  const std::string scheme = "shaw";  // named: GCC 13 warns of a dangling reference for a temporary
  const auto& info = find_scheme(scheme);
  const SchemeOptions options = resolve_scheme_options(info, {{"max_distance", k}}, "test");
  auto s = info.make({D, H, D / H, 0}, options);
  torch::manual_seed(3);
  for (auto& p : s->parameters()) p.data().normal_(0.0, 1.0);
  const auto out = describe_scheme(*s, info, options, L, H, D, D, 0);
  ASSERT_TRUE(out.contains("value_terms_of_ones"));
  const auto got = posenc::testing::tensor_of(out["value_terms_of_ones"]);          // (H, L, L)
  const auto table = s->named_parameters()["values"].detach().to(torch::kFloat64);  // (2k+1, D/H)
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{H, L, L}));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) {
        const double want = table[std::clamp<int64_t>(j - i, -k, k) + k].sum().item<double>();
        // One-hot weights pick the table's row exactly; its float32 sum of D/H = 4
        // standard normal terms errs by at most 4 u32 sum|x| < 1e-5 (|x| < 5).
        EXPECT_NEAR(got[h][i][j].item<double>(), want, tolerance::kFloat32Sum * (D / H))
            << "head " << h << ", query " << i << ", key " << j;
      }
}

TEST(Inspect, ACheckpointsInputSchemeIsDescribedWithItsTrainedWeights) {
  // ALiBi in attention beside a learned table before block 1: --input-scheme
  // describes the table, and its rows are the trained model's own.
  posenc::testing::Scratch s("inspect_input_scheme");
  const std::string config = posenc::testing::write_config(
      s, "config.json",
      {"model.positional.type=alibi", "model.positional.input=learned", "train.steps=3", "train.eval_every=3",
       "train.checkpoint_every=3", "eval.lengths=[8]", "eval.samples_per_length=8", "train.val_samples=8"});
  auto r = posenc::testing::run_cli("train " + config + " --out " + s.path("run"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ckpt = s.path("run") + "/checkpoint.pt";

  r = posenc::testing::run_cli("inspect --checkpoint " + ckpt + " --input-scheme --length 10");
  ASSERT_EQ(r.code, 0) << r.output;
  const json input = json::parse(r.output);
  EXPECT_EQ(input["scheme"], "learned");
  EXPECT_EQ(input["slot"], "model.positional.input");
  Config cfg;
  const Transformer model = load_model(ckpt, torch::kCPU, &cfg);
  const auto table = model->named_parameters()["input_positional.table"].narrow(0, 0, 10).to(torch::kFloat64);
  // embed() of zero tokens is the table's rows, copied without arithmetic.
  EXPECT_TRUE(torch::equal(posenc::testing::tensor_of(input["embedding"]), table));

  r = posenc::testing::run_cli("inspect --checkpoint " + ckpt + " --length 10");
  ASSERT_EQ(r.code, 0) << r.output;
  const json stack = json::parse(r.output);
  EXPECT_EQ(stack["scheme"], "alibi");
  EXPECT_EQ(stack["slot"], "model.positional.type");
  EXPECT_TRUE(stack.contains("bias"));

  // A model without an input scheme says so; --input-scheme without a checkpoint is refused by the flags.
  const std::string plain = posenc::testing::write_config(
      s, "plain.json",
      {"train.steps=1", "train.eval_every=1", "eval.lengths=[8]", "eval.samples_per_length=8", "train.val_samples=8"});
  ASSERT_EQ(posenc::testing::run_cli("train " + plain + " --out " + s.path("plain")).code, 0);
  r = posenc::testing::run_cli("inspect --checkpoint " + s.path("plain") + "/checkpoint.pt --input-scheme");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output,
                                         "the model has no input scheme (its model.positional.input is none)");
  r = posenc::testing::run_cli("inspect alibi --input-scheme");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--checkpoint"), std::string::npos) << r.output;
}

TEST(Inspect, ASchemeNotSharedAcrossLayersIsDescribedAtTheBlockAsked) {
  // T5 with a bias table per block: --block 2 describes the second block's
  // table (the module registered as positional1), block 1 the default one.
  posenc::testing::Scratch s("inspect_block");
  const json config = {{"model",
                        {{"d_model", 16},
                         {"heads", 2},
                         {"layers", 2},
                         {"d_ff", 32},
                         {"positional", {{"type", "t5"}, {"share_across_layers", false}}}}},
                       {"task", {{"type", "ordering"}, {"min_length", 4}, {"max_length", 8}}},
                       {"train", {{"steps", 2}, {"val_samples", 8}}},
                       {"eval", {{"lengths", {8}}, {"samples_per_length", 4}}}};
  write_file_atomic(s.path("config.json"), config.dump());
  auto r = posenc::testing::run_cli("train " + s.path("config.json") + " --out " + s.path("run"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ckpt = s.path("run") + "/checkpoint.pt";
  const json first = inspect_checkpoint(ckpt, 8), one = inspect_checkpoint(ckpt, 8, SchemeSlot::Type, 1),
             two = inspect_checkpoint(ckpt, 8, SchemeSlot::Type, 2);
  EXPECT_EQ(one["bias"], first["bias"]);
  EXPECT_EQ(two.value("block", 0), 2);
  EXPECT_NE(two["bias"], one["bias"]);

  Config cfg;
  Transformer model = load_model(ckpt, torch::kCPU, &cfg);
  auto second = std::dynamic_pointer_cast<PositionalSchemeImpl>(model->named_children()["positional1"]);
  ASSERT_TRUE(second);
  const std::string scheme = "t5";  // named: GCC 13 warns of a dangling reference for a temporary
  const auto& info = find_scheme(scheme);
  const json want = describe_scheme(*second, info, SchemeOptions(cfg.model.positional.options), 8, 2, 16, 8, 0);
  EXPECT_EQ(two["bias"], want["bias"]);

  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--block 3", "has 2 block(s)"}, {"--block 1 --input-scheme", "--block"}}) {
    r = posenc::testing::run_cli("inspect --checkpoint " + ckpt + " " + args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.output.find(says), std::string::npos) << args << ": " << r.output;
  }
}

TEST(Inspect, ACheckpointsSecondSchemeInAttentionIsDescribedWithItsTrainedWeights) {
  // RoPE with a T5 bias table per block beside it (model.positional.with):
  // --with-scheme describes the table each block trained (the modules
  // registered as with_positional0 and 1), without --block the first.
  posenc::testing::Scratch s("inspect_with_scheme");
  const json config = {{"model",
                        {{"d_model", 16},
                         {"heads", 2},
                         {"layers", 2},
                         {"d_ff", 32},
                         {"positional", {{"type", "rope"}, {"with", "t5"}, {"share_across_layers", false}}}}},
                       {"task", {{"type", "ordering"}, {"min_length", 4}, {"max_length", 8}}},
                       {"train", {{"steps", 3}, {"val_samples", 8}}},
                       {"eval", {{"lengths", {8}}, {"samples_per_length", 4}}}};
  write_file_atomic(s.path("config.json"), config.dump());
  auto r = posenc::testing::run_cli("train " + s.path("config.json") + " --out " + s.path("run"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ckpt = s.path("run") + "/checkpoint.pt";

  Config cfg;
  Transformer model = load_model(ckpt, torch::kCPU, &cfg);
  const std::string scheme = "t5";  // named: GCC 13 warns of a dangling reference for a temporary
  const auto& info = find_scheme(scheme);
  for (const int64_t block : {1, 2}) {
    auto trained = std::dynamic_pointer_cast<PositionalSchemeImpl>(
        model->named_children()["with_positional" + std::to_string(block - 1)]);
    ASSERT_TRUE(trained) << block;
    const json want = describe_scheme(*trained, info, SchemeOptions(cfg.model.positional.with_options), 8, 2, 16, 8, 0);
    r = posenc::testing::run_cli("inspect --checkpoint " + ckpt + " --with-scheme --length 8 --block " +
                                 std::to_string(block));
    ASSERT_EQ(r.code, 0) << r.output;
    const json got = json::parse(r.output);
    EXPECT_EQ(got["scheme"], "t5");
    EXPECT_EQ(got["slot"], "model.positional.with");
    EXPECT_EQ(got["bias"], want["bias"]) << "block " << block;
    if (block == 1) EXPECT_EQ(inspect_checkpoint(ckpt, 8, SchemeSlot::With)["bias"], want["bias"]);
  }
  // The tables trained apart, and type's description is still RoPE's.
  EXPECT_NE(inspect_checkpoint(ckpt, 8, SchemeSlot::With, 1)["bias"],
            inspect_checkpoint(ckpt, 8, SchemeSlot::With, 2)["bias"]);
  EXPECT_EQ(inspect_checkpoint(ckpt, 8)["scheme"], "rope");

  // Refused: --with-scheme with --input-scheme (by the flags), and on a model with no second scheme.
  r = posenc::testing::run_cli("inspect --checkpoint " + ckpt + " --with-scheme --input-scheme");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--input-scheme"), std::string::npos) << r.output;
  json plain = config;
  plain["model"]["positional"] = {{"type", "rope"}};
  write_file_atomic(s.path("plain.json"), plain.dump());
  ASSERT_EQ(posenc::testing::run_cli("train " + s.path("plain.json") + " --out " + s.path("plain")).code, 0);
  r = posenc::testing::run_cli("inspect --checkpoint " + s.path("plain") + "/checkpoint.pt --with-scheme");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(
      r.output, "the model has no second scheme in attention (its model.positional.with is none)");
}

TEST(Inspect, ASchemeThatReadsTheTasksIdsGivesTheBoundOfItsTrainingIds) {
  // Addition with Abacus ids: the learned table before block 1 reads them
  // (ids below the task's bound in training), FIRE in attention counts
  // 0..L-1, so only the input scheme's description carries the bound.
  posenc::testing::Scratch s("inspect_task_ids");
  const json config = {{"model",
                        {{"kind", "decoder"},
                         {"d_model", 32},
                         {"heads", 2},
                         {"layers", 1},
                         {"d_ff", 64},
                         {"positional", {{"type", "fire"}, {"input", "learned"}}}}},
                       {"task", {{"type", "addition"}, {"positions", "abacus"}, {"min_length", 2}, {"max_length", 4}}},
                       {"train", {{"steps", 2}, {"val_samples", 8}}},
                       {"eval", {{"lengths", {4}}, {"samples_per_length", 4}}}};
  write_file_atomic(s.path("config.json"), config.dump());
  auto r = posenc::testing::run_cli("train " + s.path("config.json") + " --out " + s.path("run"));
  ASSERT_EQ(r.code, 0) << r.output;
  const Config cfg = config_from_json(config);
  const int64_t ids_end = find_task("addition").positions_end(cfg.task, 4);
  ASSERT_GT(ids_end, 4);  // a sum's ids run past the operands' digits

  r = posenc::testing::run_cli("inspect --checkpoint " + s.path("run") + "/checkpoint.pt --input-scheme --length 12");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(json::parse(r.output).value("trained_ids_end", int64_t{-1}), ids_end) << r.output;
  r = posenc::testing::run_cli("inspect --checkpoint " + s.path("run") + "/checkpoint.pt --length 12");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(json::parse(r.output).contains("trained_ids_end")) << "fire counts 0..L-1 here";
}

}  // namespace POSENC_TEST_UNIT
