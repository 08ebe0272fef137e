// Sliding-window attention (model.attention.window) and blocks left without
// positions (model.positional.nope_every): the weights against a softmax over
// each query's window written out by hand, causal and bidirectional; the
// property that lets RoPE with a window run at any length (a decoder's output
// depends only on the last layers x (window - 1) + 1 tokens, wherever they
// lie); the KV cache and the fused kernel against the explicit path; padding
// under a window; which blocks nope_every leaves without a scheme and with full
// attention; the config's refusals; and eval setting a window on a trained model.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_helpers.h"
#include "helpers.h"
#include "length_factor_checks.h"
#include "posenc/model/attention.h"
#include "posenc/model/decoder.h"
#include "posenc/model/encoder_decoder.h"
#include "reliability_helpers.h"
#include "tolerances.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

constexpr int64_t kHeads = 2, kDh = 4, kD = kHeads * kDh;

/// Attention fed q, k, v directly, in float64, keeping its weights.
MultiHeadAttention windowed_attention(bool causal, int64_t window) {
  return posenc::testing::float64_attention(MultiHeadAttentionOptions(kD, kHeads).causal(causal).window(window));
}

/// The weights (H, L, L) of a softmax over the keys j that query i may see
/// (|i - j| < window, and j <= i when causal), each written as exp(z_ij) over
/// the sum of exp(z_ik) of those keys: a loop, not the module's masks.
torch::Tensor windowed_softmax_by_hand(const torch::Tensor& z, bool causal, int64_t window) {
  const int64_t H = z.size(0), L = z.size(1);
  auto w = torch::zeros({H, L, L}, torch::kFloat64);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i) {
      const auto sees = [&](int64_t j) { return std::abs(i - j) < window && (!causal || j <= i); };
      double total = 0.0;
      for (int64_t j = 0; j < L; ++j)
        if (sees(j)) total += std::exp(z[h][i][j].item<double>());
      for (int64_t j = 0; j < L; ++j)
        if (sees(j)) w[h][i][j] = std::exp(z[h][i][j].item<double>()) / total;
    }
  return w;
}

/// A small copy decoder (width 32, 4 heads) of `layers` blocks with `scheme` and overrides, random positional
/// parameters.
Decoder small_decoder(const std::string& scheme, int64_t layers, const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {"model.layers=" + std::to_string(layers)};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return posenc::testing::random_positional_model<Decoder>(
      posenc::testing::small_next_token_config("decoder", scheme, overrides).model, 3);
}

/// A 2-block RoPE language model (width 32) trained briefly at 32 characters into `run`, with `flags` beside.
posenc::testing::CliRun train_small_rope_charlm(const std::string& run, const std::string& flags) {
  return posenc::testing::train_shipped(
      "charlm.json", run,
      "--set model.positional.type=rope --set task.min_length=32 --set task.max_length=32 "
      "--set eval.samples_per_length=64 --set train.val_samples=8 --set model.d_model=32 --set model.d_ff=64 "
      "--set model.layers=2 --set eval.lengths=[32] " +
          flags);
}

}  // namespace

TEST(AttentionWindow, AQuerySeesOnlyTheKeysInItsWindow) {
  const int64_t L = 9, window = 3;
  torch::manual_seed(1);
  const auto q = torch::randn({1, L, kD}, torch::kFloat64), k = torch::randn({1, L, kD}, torch::kFloat64);
  const auto v = torch::randn({1, L, kD}, torch::kFloat64);
  torch::NoGradGuard no_grad;
  for (const bool causal : {true, false}) {
    auto attention = windowed_attention(causal, window);
    attention->attend(q, k, v, nullptr, posenc::testing::arange_positions(L));
    const auto w = attention->last_weights()[0];  // (H, L, L)
    EXPECT_TRUE(
        torch::allclose(w, windowed_softmax_by_hand(posenc::testing::per_head_logits(q, k, kHeads), causal, window),
                        0.0, tolerance::kFloat64))
        << (causal ? "causal" : "bidirectional");
    // Outside the band |i - j| < window nothing, exactly (the mask is -inf, not a large negative number).
    const auto band = torch::ones({L, L}, torch::kFloat64).triu(-(window - 1)).tril(window - 1);
    EXPECT_EQ((w * (1 - band)).abs().sum().item<double>(), 0.0);
  }
  // A window as wide as the sequence is no window.
  auto wide = windowed_attention(true, L), full = windowed_attention(true, 0);
  const auto pos = posenc::testing::arange_positions(L);
  wide->attend(q, k, v, nullptr, pos);
  full->attend(q, k, v, nullptr, pos);
  EXPECT_TRUE(torch::equal(wide->last_weights(), full->last_weights()));
}

TEST(AttentionWindow, RopeWithAWindowGivesTheSameOutputWhereverTheLastTokensLie) {
  // With RoPE (offsets only) and a window W in each of `layers` blocks, the output at a position depends only on
  // the last layers x (W - 1) + 1 tokens, not on where they lie: so a decoder trained at 128 tokens reads token
  // 1000 as it read token 127. Without the window, or with a full-attention NoPE block (nope_every), the tokens
  // further back change it.
  const int64_t layers = 2, window = 4, reach = layers * (window - 1) + 1, L = 40;
  torch::manual_seed(4);
  const auto tokens = torch::randint(1, 17, {2, L}, torch::kLong);
  const auto last = [&](Decoder& model, const torch::Tensor& t) {
    return model->forward(t).select(1, t.size(1) - 1);  // (2, V): the last position's logits
  };
  torch::NoGradGuard no_grad;
  auto windowed = small_decoder("rope", layers, {"model.attention.window=" + std::to_string(window)});
  const auto at_end = last(windowed, tokens);
  const auto alone = last(windowed, tokens.narrow(1, L - reach, reach));
  EXPECT_TRUE(torch::allclose(at_end, alone, tolerance::kFloat32Model, tolerance::kFloat32Model))
      << (at_end - alone).abs().max().item<double>();
  // One token more would be out of reach; changing the one just in reach changes the output.
  auto changed = tokens.clone();
  changed.narrow(1, 0, L - reach).random_(1, 17);
  EXPECT_TRUE(torch::allclose(last(windowed, changed), at_end, tolerance::kFloat32Model, tolerance::kFloat32Model));
  changed[0][L - reach] = tokens[0][L - reach].item<int64_t>() % 16 + 1;
  EXPECT_FALSE(torch::allclose(last(windowed, changed), at_end, tolerance::kFloat32Model, tolerance::kFloat32Model));

  for (const auto& extra : std::vector<std::vector<std::string>>{
           {}, {"model.attention.window=" + std::to_string(window), "model.positional.nope_every=2"}}) {
    auto model = small_decoder("rope", layers, extra);
    EXPECT_FALSE(torch::allclose(last(model, tokens), last(model, tokens.narrow(1, L - reach, reach)),
                                 tolerance::kFloat32Model, tolerance::kFloat32Model))
        << (extra.empty() ? "no window" : "window with a NoPE block");
  }
}

TEST(AttentionWindow, KvCacheAndFusedKernelGiveTheExplicitPathsLogits) {
  // 14 tokens, the first 5 as a prompt: the cached steps see 6 to 14 keys, the window 4 of them.
  for (const char* scheme : {"none", "rope", "alibi", "fire"}) {
    auto model = small_decoder(scheme, 3, {"model.attention.window=4"});
    posenc::testing::expect_cache_and_fused_match_explicit(model, std::string(scheme) + " window 4");
    auto hybrid = small_decoder(scheme == std::string("none") ? "rope" : scheme, 3,
                                {"model.attention.window=4", "model.positional.nope_every=3"});
    posenc::testing::expect_cache_and_fused_match_explicit(hybrid, std::string(scheme) + " window 4, nope_every 3");
  }
  auto sticks = small_decoder("none", 2, {"model.attention.window=4", "model.attention.weights=stick_breaking"});
  posenc::testing::expect_cache_and_fused_match_explicit(sticks, "stick-breaking, window 4");
}

TEST(AttentionWindow, PaddedSourcesStayFiniteAndTheirPaddingChangesNothing) {
  // An encoder_decoder's source batch: row 1 is 3 tokens shorter, padded. Under a window of 2 the padding's own
  // queries see only padding; they must not turn into NaN, and the real tokens' states must be those of the
  // unpadded source.
  auto cfg = posenc::testing::small_next_token_config("encoder_decoder", "rope", {"model.attention.window=2"});
  auto model = posenc::testing::random_positional_model<EncoderDecoder>(cfg.model, 5);
  torch::NoGradGuard no_grad;
  auto source = torch::randint(1, 17, {2, 9}, torch::kLong);
  source[1].narrow(0, 6, 3).fill_(0);
  const auto memory = model->encode(source);
  EXPECT_TRUE(torch::isfinite(memory.states).all().item<bool>());
  const auto unpadded = model->encode(source.narrow(0, 1, 1).narrow(1, 0, 6));
  EXPECT_TRUE(torch::allclose(memory.states[1].narrow(0, 0, 6), unpadded.states[0], tolerance::kFloat32Model,
                              tolerance::kFloat32Model));
}

TEST(NopeBlocks, TheNamedBlocksHaveNoSchemeAndKeepFullAttention) {
  // 4 blocks, nope_every 2: blocks 2 and 4 without RoPE and without the window of 3.
  for (const bool shared : {true, false}) {
    auto model = small_decoder("rope", 4,
                               {"model.positional.nope_every=2", "model.attention.window=3",
                                std::string("model.positional.share_across_layers=") + (shared ? "true" : "false")});
    for (int64_t block = 1; block <= 4; ++block)
      EXPECT_EQ(model->scheme_at_block(block) == nullptr, block % 2 == 0) << "block " << block;
    int64_t instances = 0;
    for (const auto& m : model->named_modules())
      if (m.key().find("positional") != std::string::npos && m.key().find('.') == std::string::npos) ++instances;
    EXPECT_EQ(instances, shared ? 1 : 2);

    const int64_t L = 12;
    torch::NoGradGuard no_grad;
    model->keep_attention(true);
    model->forward(torch::randint(1, 17, {1, L}, torch::kLong));
    const auto maps = model->attention_maps();  // 4 x (1, H, L, L)
    ASSERT_EQ(maps.size(), 4u);
    const auto beyond = torch::ones({L, L}).tril(-3);  // keys 3 or more tokens back
    for (int64_t block = 1; block <= 4; ++block) {
      const double far = (maps[block - 1][0] * beyond).sum().item<double>();
      if (block % 2 == 1)
        EXPECT_EQ(far, 0.0) << "block " << block << " is windowed";
      else
        EXPECT_GT(far, 0.1) << "block " << block << " keeps full attention";
    }
  }
}

TEST(NopeBlocks, TheConfigRefusesWhatLeavesNothingOut) {
  const auto refused = [](std::initializer_list<std::string> overrides, const std::string& says) {
    const std::string error = posenc::testing::config_error(overrides);
    EXPECT_NE(error.find("model.positional.nope_every"), std::string::npos) << error;
    EXPECT_NE(error.find(says), std::string::npos) << error;
  };
  refused({"model.positional.nope_every=1"}, "every block");
  refused({"model.layers=3", "model.positional.nope_every=4"}, "model.layers=3");
  refused({"model.kind=encoder_decoder", "task.type=scan", "model.layers=3", "model.decoder_layers=2",
           "model.positional.nope_every=3"},
          "model.decoder_layers=2");
  refused({"model.positional.type=none", "model.positional.nope_every=2"}, "type is none");
  refused({"model.positional.type=sinusoidal", "model.positional.nope_every=2"}, "before block 1");
  refused({"model.positional.type=alibi", "model.positional.apply_to=input", "model.positional.nope_every=2"},
          "before block 1");
  EXPECT_NE(posenc::testing::config_error({"model.attention.window=-1"}).find("model.attention.window"),
            std::string::npos);
  // What they leave at their defaults is not written, so resolved configs of earlier runs read the same.
  const json written = config_to_json(posenc::testing::config_with({"model.positional.type=rope"}));
  EXPECT_FALSE(written["model"]["attention"].contains("window"));
  EXPECT_FALSE(written["model"]["positional"].contains("nope_every"));
}

TEST(AttentionWindow, EvalSetsAWindowOnATrainedModel) {
  // A RoPE language model trained at 32 characters, evaluated at 128 as trained and with a window of 32:
  // the window is a change eval accepts (no parameter), and it changes the scores past training only.
  posenc::testing::Scratch s("attention_window_eval");
  const std::string run = s.path("run");
  const auto r = train_small_rope_charlm(run, "--set train.steps=30 --set eval.lengths=[32,128]");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto scores = [&](const std::string& flags, const std::string& out) {
    auto e =
        posenc::testing::run_cli("eval " + run + "/checkpoint.pt --lengths 32,128 --out " + s.path(out) + " " + flags);
    EXPECT_EQ(e.code, 0) << e.output;
    std::ifstream in(s.path(out));
    return nlohmann::json::parse(in)["lengths"];
  };
  const auto plain = scores("", "plain.json"), windowed = scores("--set model.attention.window=32", "window.json");
  ASSERT_TRUE(plain.is_array() && windowed.is_array()) << plain.dump() << windowed.dump();
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(windowed.size(), 2u);
  // At 32 every query sees at most 32 keys either way.
  EXPECT_DOUBLE_EQ(plain[0]["perplexity"].get<double>(), windowed[0]["perplexity"].get<double>());
  EXPECT_NE(plain[1]["perplexity"].get<double>(), windowed[1]["perplexity"].get<double>());
  // The attention's other keys are what the checkpoint was trained as.
  auto bad = posenc::testing::run_cli("eval " + run + "/checkpoint.pt --set model.attention.weights=stick_breaking");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("model.attention.window"), std::string::npos) << bad.output;  // named as one it takes
}

TEST(NopeBlocks, HeadsNamesEachBlocksWindowAndReadsItsHeadsOverIt) {
  // A hybrid language model (2 blocks: RoPE windowed to 8 tokens, then NoPE with full attention), read by
  // `posenc heads` at 64 characters: block 1's queries see at most 8 keys, block 2's all before them.
  posenc::testing::Scratch s("nope_blocks_heads");
  const std::string run = s.path("run");
  const auto r = train_small_rope_charlm(
      run, "--set model.positional.nope_every=2 --set model.attention.window=8 --set train.steps=20");
  ASSERT_EQ(r.code, 0) << r.output;
  auto h = posenc::testing::run_cli("heads " + run + "/checkpoint.pt --lengths 64 --samples 4 --json " +
                                    s.path("heads.json"));
  ASSERT_EQ(h.code, 0) << h.output;
  std::ifstream in(s.path("heads.json"));
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["window"], 8);
  EXPECT_EQ(j["nope_every"], 2);
  const auto& blocks = j["lengths"][0]["blocks"];
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0]["window"], 8);
  EXPECT_EQ(blocks[0]["nope_block"], false);
  EXPECT_EQ(blocks[1]["window"], 0);
  EXPECT_EQ(blocks[1]["nope_block"], true);
  // Query i sees min(i + 1, 8) keys in block 1 and i + 1 in block 2: means over i < 64 of 7.56 and 32.5.
  EXPECT_NEAR(blocks[0]["keys_seen"].get<double>(), (28.0 + 8.0 * 57) / 64, 1e-9);
  EXPECT_NEAR(blocks[1]["keys_seen"].get<double>(), 32.5, 1e-9);
  for (const auto& head : blocks[0]["heads"]) EXPECT_LT(head["distance"].get<double>(), 7.0 + 1e-6);
  // And inspect names why block 2 has no scheme to describe.
  auto inspect = posenc::testing::run_cli("inspect --checkpoint " + run + "/checkpoint.pt --block 2 --json " +
                                          s.path("inspect.json"));
  EXPECT_EQ(inspect.code, 2) << inspect.output;
  EXPECT_NE(inspect.output.find("nope_every=2"), std::string::npos) << inspect.output;
}

TEST(NopeBlocks, TheShippedCopyConfigIsTheSearchGridsRowEvaluatedTo256) {
  // configs/copy_hybrid.json trains what the window-4, 9000-step row of the search grid trained
  // (docs/results.md holds its three seeds), with evaluation lengths to 256 (16x).
  const Config shipped = posenc::testing::expect_shipped_config_trains_grid_row(
      "configs/copy_hybrid.json", "configs/copy_hybrid_search_compare.json", "copy-rnope-swa-w4-9k-projected-max-s0");
  EXPECT_EQ(shipped.eval.lengths.back(), 256);
  EXPECT_EQ(shipped.model.attention_window, 4);
  EXPECT_EQ(shipped.model.positional.nope_every, 3);
}

}  // namespace POSENC_TEST_UNIT
