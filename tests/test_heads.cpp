// Where each attention head looks, over many examples (analysis/heads.h,
// `posenc heads`): the statistics of maps whose answer is known in closed
// form, the same numbers as scripts/attention_stats.py (an independent
// implementation in plain Python) reads from `posenc attention`, every model
// kind's blocks, and the requests the command refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/analysis/heads.h"
#include "posenc/config.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/util/io.h"
#include "posenc/util/process.h"
#include "posenc/util/python.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using json = nlohmann::json;

// The maps below are float32 probabilities of at most 6 keys: each statistic
// is a sum of at most 6 products of them with exact small integers, so it errs
// by a few float32 roundings of 1 (6e-8 each) relative to its size.
constexpr double kMapTolerance = 1e-6;

TEST(Heads, AFlatHeadAndAHeadOnItselfHaveTheirClosedFormStatistics) {
  const int64_t L = 5;
  auto maps = torch::zeros({2, 2, L, L}, torch::kFloat);     // (B, H, L, L)
  maps.select(1, 0).fill_(1.0 / L);                          // head 0: flat over every key
  maps.select(1, 1).copy_(torch::eye(L).expand({2, L, L}));  // head 1: every query on itself
  const auto all = torch::ones({2, L}, torch::kBool);
  HeadAccumulator acc;
  acc.add(maps, all, all, /*causal=*/false);
  const auto s = acc.stats();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(acc.queries(), 2 * L);
  // Flat: query i puts i/L left and (L-1-i)/L right, on average (L-1)/(2L)
  // each; its mean |j - i| over L keys averages to (L^2 - 1)/(3L); entropy log L.
  const double l = static_cast<double>(L);
  EXPECT_NEAR(s[0].left, (l - 1) / (2 * l), kMapTolerance);
  EXPECT_NEAR(s[0].self, 1 / l, kMapTolerance);
  EXPECT_NEAR(s[0].right, (l - 1) / (2 * l), kMapTolerance);
  EXPECT_NEAR(s[0].distance, (l * l - 1) / (3 * l), kMapTolerance);
  EXPECT_NEAR(s[0].entropy, std::log(l), kMapTolerance);
  EXPECT_NEAR(s[0].flatness, 1.0, kMapTolerance);
  EXPECT_NEAR(s[0].effective_keys, l, kMapTolerance * l);
  // On itself: everything on j = i, nothing spread.
  EXPECT_EQ(s[1].self, 1.0);
  EXPECT_EQ(s[1].left + s[1].right + s[1].distance + s[1].entropy + s[1].flatness, 0.0);
  EXPECT_EQ(s[1].effective_keys, 1.0);
  // The flat head is the reference a flat head is given.
  EXPECT_NEAR(acc.flat_distance(), (l * l - 1) / (3 * l), 1e-12);
  EXPECT_EQ(acc.flat_keys(), l);
}

TEST(Heads, ACausalHeadIsReadOverTheKeysItSeesAndPaddingIsNoQuery) {
  // Example 0 has 6 tokens, example 1 has 4 and 2 of padding after them. The
  // head is flat over the keys each query sees (1/(i+1) on j <= i); padding's
  // rows hold mass where no real query puts it (key 5), to show they are left out.
  const int64_t L = 6;
  auto maps = torch::zeros({2, 1, L, L}, torch::kFloat);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < L; ++i) maps[b][0][i].narrow(0, 0, i + 1).fill_(1.0 / static_cast<double>(i + 1));
  maps[1][0].narrow(0, 4, 2).zero_().select(1, 5).fill_(1.0);
  auto tokens = torch::ones({2, L}, torch::kBool);
  tokens[1].narrow(0, 4, 2).fill_(false);
  HeadAccumulator acc;
  acc.add(maps, tokens, tokens, /*causal=*/true);
  // Query i: left i/(i+1), self 1/(i+1), mean distance i/2, entropy log(i+1);
  // averaged over the 6 + 4 queries, and the flatness (1) over the 5 + 3 that see 2 keys or more.
  double left = 0, self = 0, distance = 0, entropy = 0;
  for (const int64_t tokens_in : {6, 4})
    for (int64_t i = 0; i < tokens_in; ++i) {
      left += static_cast<double>(i) / static_cast<double>(i + 1) / 10;
      self += 1.0 / static_cast<double>(i + 1) / 10;
      distance += static_cast<double>(i) / 2 / 10;
      entropy += std::log(static_cast<double>(i + 1)) / 10;
    }
  const auto s = acc.stats();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(acc.queries(), 10);
  EXPECT_NEAR(s[0].left, left, kMapTolerance);
  EXPECT_NEAR(s[0].self, self, kMapTolerance);
  EXPECT_EQ(s[0].right, 0.0);  // nothing after the query: the causal mask's zeros are exact
  EXPECT_NEAR(s[0].distance, distance, kMapTolerance);
  EXPECT_NEAR(s[0].entropy, entropy, kMapTolerance);
  EXPECT_NEAR(s[0].flatness, 1.0, kMapTolerance);
  EXPECT_NEAR(acc.flat_distance(), distance, 1e-12);        // this head is the flat one
  EXPECT_NEAR(acc.flat_keys(), (21.0 + 10.0) / 10, 1e-12);  // 1 + ... + 6 and 1 + ... + 4 keys seen

  // Added an example at a time, the sums are the same.
  HeadAccumulator parts;
  for (int64_t b = 0; b < 2; ++b) parts.add(maps.narrow(0, b, 1), tokens.narrow(0, b, 1), tokens.narrow(0, b, 1), true);
  EXPECT_EQ(parts.queries(), acc.queries());
  EXPECT_NEAR(parts.stats()[0].distance, s[0].distance, 1e-12);
  EXPECT_NEAR(parts.stats()[0].effective_keys, s[0].effective_keys, 1e-12);
  EXPECT_THROW(parts.add(torch::zeros({1, 2, L, L}), tokens.narrow(0, 0, 1), tokens.narrow(0, 0, 1), true),
               c10::Error);  // two heads where the earlier chunks had one
}

TEST(Heads, AWindowedHeadIsReadOverTheKeysInItsWindow) {
  // A causal head flat over the window of 3 keys each query sees (model.attention.window = 3): query i sees
  // n = min(i + 1, 3) keys at mean distance (n - 1) / 2, so a flat head is this one, and flatness is 1.
  const int64_t L = 6, window = 3;
  auto maps = torch::zeros({1, 1, L, L}, torch::kFloat);
  for (int64_t i = 0; i < L; ++i) {
    const int64_t n = std::min<int64_t>(i + 1, window);
    maps[0][0][i].narrow(0, i + 1 - n, n).fill_(1.0 / static_cast<double>(n));
  }
  const auto all = torch::ones({1, L}, torch::kBool);
  HeadAccumulator acc;
  acc.add(maps, all, all, /*causal=*/true, window);
  const auto s = acc.stats();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_NEAR(acc.flat_keys(), (1.0 + 2.0 + 3.0 * 4) / 6, 1e-12);
  EXPECT_NEAR(acc.flat_distance(), (0.0 + 0.5 + 1.0 * 4) / 6, 1e-12);
  EXPECT_NEAR(s[0].distance, acc.flat_distance(), kMapTolerance);
  EXPECT_NEAR(s[0].flatness, 1.0, kMapTolerance);
  // Read as if it saw every earlier key, the same head is not flat.
  HeadAccumulator unwindowed;
  unwindowed.add(maps, all, all, /*causal=*/true);
  EXPECT_LT(unwindowed.stats()[0].flatness, 0.95);
}

TEST(Heads, ALogitFactorIsAveragedOverTheQueriesCounted) {
  // Factors (1, H, L, 1) that differ by head and query: the mean over the counted queries, exactly (sums of
  // a few small binary fractions); one chunk or two; NaN where no chunk had a factor.
  const int64_t L = 4;
  auto maps = torch::zeros({2, 2, L, L}, torch::kFloat);
  maps.fill_(1.0 / L);
  const auto factor = torch::tensor({0.5, 1.0, 1.5, 2.0, 4.0, 4.0, 4.0, 8.0}, torch::kFloat).view({1, 2, L, 1});
  auto queries = torch::ones({2, L}, torch::kBool);
  queries[1][0] = false;  // row 1's first query is not counted: 7 queries
  const auto keys = torch::ones({2, L}, torch::kBool);
  HeadAccumulator acc;
  acc.add(maps, queries, keys, /*causal=*/false, 0, factor);
  auto s = acc.stats();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].logit_factor, (2 * (0.5 + 1.0 + 1.5 + 2.0) - 0.5) / 7);
  EXPECT_EQ(s[1].logit_factor, (2 * (4.0 + 4.0 + 4.0 + 8.0) - 4.0) / 7);
  // The same rows as two chunks of one row each.
  HeadAccumulator parts;
  parts.add(maps.narrow(0, 0, 1), queries.narrow(0, 0, 1), keys.narrow(0, 0, 1), false, 0, factor);
  parts.add(maps.narrow(0, 1, 1), queries.narrow(0, 1, 1), keys.narrow(0, 1, 1), false, 0, factor);
  EXPECT_EQ(parts.stats()[1].logit_factor, s[1].logit_factor);
  // A factor the same for every query (1, H, 1, 1), as the head scale alone gives, and one with a wrong shape.
  HeadAccumulator per_head;
  per_head.add(maps, queries, keys, false, 0, torch::tensor({0.25, 3.0}, torch::kFloat).view({1, 2, 1, 1}));
  EXPECT_EQ(per_head.stats()[0].logit_factor, 0.25);
  EXPECT_EQ(per_head.stats()[1].logit_factor, 3.0);
  EXPECT_THROW(per_head.add(maps, queries, keys, false, 0, torch::ones({1, 2, L})), c10::Error);
  // Without a factor there is none to report.
  HeadAccumulator plain;
  plain.add(maps, queries, keys, false);
  EXPECT_TRUE(std::isnan(plain.stats()[0].logit_factor));
}

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

}  // namespace

TEST(Heads, AnEncodersStatisticsAreAttentionStatsOverTheSameExamples) {
  // scripts/attention_stats.py reads one example's maps from `posenc attention`;
  // averaged over every sorted example of the set, its left, self, right and
  // distance are what `posenc heads --kind sorted` reports over them at once.
  const std::string python = find_python("json");
  if (python.empty()) GTEST_SKIP() << "no python3";
  posenc::testing::Scratch s("heads_golden");
  const std::string ckpt = posenc::testing::train_tiny(s, "encoder") + "/checkpoint.pt";
  auto r = posenc::testing::run_cli("heads " + ckpt + " --lengths 8 --samples 8 --kind sorted --json " +
                                    s.path("heads.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("d@8"), std::string::npos) << r.output;  // the table beside the file
  const json h = read_json(s.path("heads.json"));
  EXPECT_EQ(h["written_by"], "posenc heads");
  EXPECT_EQ(h["example_kind"], "sorted");
  const int64_t examples = h["lengths"][0]["examples"].get<int64_t>();
  ASSERT_GE(examples, 1);
  ASSERT_LT(examples, 8);  // the set also holds negatives, left out
  std::vector<std::string> files;
  for (int64_t i = 0; i < examples; ++i) {
    files.push_back(s.path("attention_" + std::to_string(i) + ".json"));
    r = posenc::testing::run_cli("attention " + ckpt + " --length 8 --kind sorted --index " + std::to_string(i) +
                                 " --json " + files.back());
    ASSERT_EQ(r.code, 0) << r.output;
  }
  // Past the last sorted example, --index is refused: heads counted them all.
  r = posenc::testing::run_cli("attention " + ckpt + " --length 8 --kind sorted --index " + std::to_string(examples));
  EXPECT_EQ(r.code, 2) << r.output;

  // attention_stats.head_stats per block and head, averaged over the files, at full precision.
  std::string program =
      "import json, sys\nsys.path.insert(0, sys.argv[1])\nimport attention_stats as a\nfiles = sys.argv[2:]\n"
      "out = None\nfor f in files:\n  d = json.load(open(f))\n"
      "  s = [[a.head_stats(head, None) for head in block] for block in d['layers']]\n"
      "  out = s if out is None else [[{k: o[k] + v[k] for k in ('left', 'self', 'right', 'distance')} "
      "for o, v in zip(ob, vb)] for ob, vb in zip(out, s)]\n"
      "print(json.dumps([[{k: h[k] / len(files) for k in ('left', 'self', 'right', 'distance')} for h in b] "
      "for b in out]))\n";
  write_file_atomic(s.path("golden.py"), program);
  std::vector<std::string> argv = {python, s.path("golden.py"), std::string(POSENC_SOURCE_DIR) + "/scripts"};
  argv.insert(argv.end(), files.begin(), files.end());
  std::string output;
  ASSERT_EQ(run_command(argv, output), 0) << output;
  const json golden = json::parse(output);
  const auto& blocks = h["lengths"][0]["blocks"];
  ASSERT_EQ(blocks.size(), golden.size());
  // The maps of one forward over all the examples and of one forward each
  // differ by float32 rounding in the scores (width 32: a few 1e-7 of a
  // logit), which moves a probability by about that much of itself; summed
  // with distances up to 7 over 8 keys, well inside 1e-5.
  for (size_t b = 0; b < blocks.size(); ++b) {
    EXPECT_EQ(blocks[b]["block"], "block " + std::to_string(b + 1));
    EXPECT_EQ(blocks[b]["queries"], examples * 8);
    ASSERT_EQ(blocks[b]["heads"].size(), golden[b].size());
    for (size_t i = 0; i < golden[b].size(); ++i)
      for (const char* key : {"left", "self", "right", "distance"})
        EXPECT_NEAR(blocks[b]["heads"][i][key].get<double>(), golden[b][i][key].get<double>(), 1e-5)
            << "block " << b << " head " << i << " " << key;
  }
}

TEST(Heads, EveryModelKindsBlocksAreReadAndBadRequestsRefused) {
  posenc::testing::Scratch s("heads_kinds");
  const std::string encoder = posenc::testing::train_tiny(s, "encoder") + "/checkpoint.pt";
  for (const std::string kind : {"decoder", "encoder_decoder"}) {
    const std::string ckpt = posenc::testing::train_tiny(s, kind) + "/checkpoint.pt";
    auto r = posenc::testing::run_cli("heads " + ckpt + " --lengths 6,8 --samples 5");
    ASSERT_EQ(r.code, 0) << r.output;
    const json h = json::parse(r.output);  // no --json: the JSON alone on standard output
    ASSERT_EQ(h["lengths"].size(), 2u);
    const auto& blocks = h["lengths"][1]["blocks"];
    const size_t expected = kind == "decoder" ? 2u : 3u;  // small_config's 2 blocks; 2 encoder + 1 decoder
    ASSERT_EQ(blocks.size(), expected) << blocks.dump();
    for (const auto& block : blocks) {
      const bool causal = kind == "decoder" || block["block"] == "decoder block 1";
      EXPECT_EQ(block["causal"], causal) << block["block"];
      for (const auto& head : block["heads"]) {
        EXPECT_NEAR(head["left"].get<double>() + head["self"].get<double>() + head["right"].get<double>(), 1.0, 1e-6);
        if (causal) {
          EXPECT_EQ(head["right"], 0.0) << block["block"];
        }
        EXPECT_GE(head["effective_keys"].get<double>(), 1.0 - 1e-9);
        EXPECT_LE(head["effective_keys"].get<double>(), block["keys_seen"].get<double>() * (1 + 1e-6));
      }
    }
    EXPECT_EQ(h["lengths"][1]["accuracy"], nullptr);  // a next-token model is not scored here
    if (kind == "encoder_decoder") {
      EXPECT_EQ(blocks[0]["block"], "encoder block 1");
      EXPECT_EQ(blocks[2]["block"], "decoder block 1");
      EXPECT_EQ(blocks[0]["queries"], 5 * 8);  // copy's source: 8 tokens, no padding
      r = posenc::testing::run_cli("heads " + ckpt + " --queries answer");
      EXPECT_EQ(r.code, 2) << r.output;
      posenc::testing::expect_one_line_error(r.output, "its decoder reads only the answer");
      continue;
    }
    // A decoder's answer queries: those that predict an answer token, from SEP on.
    const auto task =
        make_task(posenc::testing::config_with({"task.type=copy", "task.vocab_size=16", "model.kind=decoder"}).task);
    const auto set = task->fixed_set(8, 5, 0);
    const int64_t answer_queries = set.tokens.size(1) - set.answer_start;  // SEP .. the answer's last but one
    r = posenc::testing::run_cli("heads " + ckpt + " --lengths 8 --samples 5 --queries answer");
    ASSERT_EQ(r.code, 0) << r.output;
    const json a = json::parse(r.output);
    EXPECT_EQ(a["queries"], "answer");
    EXPECT_EQ(a["lengths"][0]["blocks"][0]["queries"], 5 * answer_queries);
    EXPECT_EQ(blocks[0]["queries"], 5 * (set.tokens.size(1) - 1));  // every token but the last
    r = posenc::testing::run_cli("heads " + ckpt + " --kind sorted");
    EXPECT_EQ(r.code, 2) << r.output;
    posenc::testing::expect_one_line_error(r.output, "have no kinds");
  }
  // The encoder: scored on the examples it read; refusals name what was wrong.
  auto r = posenc::testing::run_cli("heads " + encoder + " --samples 6");  // the checkpoint's eval.lengths: 8
  ASSERT_EQ(r.code, 0) << r.output;
  const json e = json::parse(r.output);
  EXPECT_EQ(e["lengths"][0]["length"], 8);
  EXPECT_EQ(e["lengths"][0]["examples"], 6);
  const double accuracy = e["lengths"][0]["accuracy"].get<double>();
  EXPECT_NEAR(accuracy * 6, std::round(accuracy * 6), 1e-9);  // a share of 6 examples
  const auto expect_refused = [&](const std::string& flags, const std::string& names) {
    const auto refused = posenc::testing::run_cli("heads " + encoder + " " + flags);
    EXPECT_EQ(refused.code, 2) << flags << ": " << refused.output;
    EXPECT_NE(refused.output.find(names), std::string::npos) << flags << ": " << refused.output;
  };
  expect_refused("--kind sideways", "has the kinds sorted, shuffle");
  expect_refused("--queries answer", "a classifier reads no answer");
  expect_refused("--queries some", "--queries");
  expect_refused("--lengths 8,8", "--lengths: 8 appears twice");
  expect_refused("--samples 0", "--samples");
  expect_refused("--lengths 1", "--lengths");
}

TEST(Heads, TheLogitFactorIsScalableSoftmaxLogNAndTheHeadScaleOfTheKeysEachQuerySees) {
  // A copy decoder with Scalable-Softmax, LogN scaling past 4 keys and the head scale, all three on: at length
  // 8 (17 tokens, no padding) the query at column i sees n = i + 1 keys, so head h of block b multiplies its
  // logits by s_bh lambda_bh log n max(1, log n / log 4), whose mean over the queries counted `heads` must
  // report; s and lambda read from the checkpoint here.
  posenc::testing::Scratch s("heads_factor");
  const std::string config = posenc::testing::write_config(
      s, "factors.json",
      {"train.steps=2", "train.eval_every=2", "train.checkpoint_every=2", "train.val_samples=8", "eval.lengths=[8]",
       "eval.samples_per_length=8", "task.type=copy", "task.vocab_size=16", "model.kind=decoder",
       "model.attention.log_length_scale=0.43", "model.attention.logn_from=4", "model.attention.head_scale=true"});
  auto r = posenc::testing::run_cli("train " + config + " --out " + s.path("run"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ckpt = s.path("run") + "/checkpoint.pt";
  Config cfg;
  Transformer model = load_model(ckpt, torch::kCPU, &cfg);
  std::vector<at::Tensor> length_scales, head_scales;  // (H) per block, in block order
  for (const auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    const auto ends_with = [&](const std::string& tail) {
      return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (ends_with(".length_scale")) length_scales.push_back(p.value().detach().to(torch::kFloat64));
    if (ends_with(".head_scale")) head_scales.push_back(p.value().detach().to(torch::kFloat64));
  }
  ASSERT_EQ(length_scales.size(), 2u);  // small_config's 2 blocks
  ASSERT_EQ(head_scales.size(), 2u);
  const auto task = make_task(cfg.task);
  const auto set = task->fixed_set(8, 5, cfg.eval.seed);
  const int64_t columns = set.tokens.size(1) - 1;  // the decoder reads every token but the last
  for (const std::string queries : {"all", "answer"}) {
    r = posenc::testing::run_cli("heads " + ckpt + " --lengths 8 --samples 5 --queries " + queries + " --json " +
                                 s.path("heads_" + queries + ".json"));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("f@8"), std::string::npos) << r.output;  // the factor's columns in the table
    const json h = read_json(s.path("heads_" + queries + ".json"));
    const int64_t first = queries == "all" ? 0 : set.answer_start - 1;
    double mean = 0;  // the mean of log n max(1, log n / log 4) over the columns counted
    for (int64_t i = first; i < columns; ++i) {
      const double n = static_cast<double>(i + 1);
      mean += std::log(n) * std::max(1.0, std::log(n) / std::log(4.0));
    }
    mean /= static_cast<double>(columns - first);
    for (size_t b = 0; b < 2; ++b)
      for (int64_t head = 0; head < cfg.model.heads; ++head) {
        const double expected = length_scales[b][head].item<double>() * head_scales[b][head].item<double>() * mean;
        // The attention computes the factor in float32: a few roundings of it, relative.
        EXPECT_NEAR(h["lengths"][0]["blocks"][b]["heads"][head]["logit_factor"].get<double>(), expected,
                    1e-6 * std::abs(expected))
            << queries << " block " << b + 1 << " head " << head;
      }
  }
  // A model without a factor reports none, and its table has no column for it.
  const std::string plain = posenc::testing::train_tiny(s, "decoder") + "/checkpoint.pt";
  r = posenc::testing::run_cli("heads " + plain + " --lengths 8 --samples 5 --json " + s.path("plain.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("f@8"), std::string::npos) << r.output;
  EXPECT_EQ(read_json(s.path("plain.json"))["lengths"][0]["blocks"][0]["heads"][0]["logit_factor"], nullptr);

  // Read with LogN past 4 keys set on the command line (it adds no parameter): every head's factor is
  // the mean of max(1, log n / log 4), and the change is recorded; a change that is not allowed is refused.
  r = posenc::testing::run_cli("heads " + plain + " --lengths 8 --samples 5 --set model.attention.logn_from=4 --json " +
                               s.path("logn.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("read with --set model.attention.logn_from=4"), std::string::npos) << r.output;
  const json logn = read_json(s.path("logn.json"));
  EXPECT_EQ(logn["overrides"], json::array({"model.attention.logn_from=4"}));
  double logn_mean = 0;
  for (int64_t i = 0; i < columns; ++i) logn_mean += std::max(1.0, std::log(i + 1.0) / std::log(4.0));
  logn_mean /= static_cast<double>(columns);
  for (const auto& block : logn["lengths"][0]["blocks"])
    for (const auto& head : block["heads"])
      EXPECT_NEAR(head["logit_factor"].get<double>(), logn_mean, 1e-6 * logn_mean) << block["block"];
  r = posenc::testing::run_cli("heads " + plain + " --set model.d_model=16");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "the rest is what the checkpoint was trained as");
}

}  // namespace POSENC_TEST_UNIT
