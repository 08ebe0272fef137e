// Positions a task defines (TaskBatch::positions): addition's abacus and
// coupled ids, the model reading them through the embedding scheme (per row,
// from a KV cache), and the configs that cannot.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "helpers.h"
#include "posenc/analysis/trained.h"
#include "posenc/model/decoder.h"
#include "posenc/model/transformer.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/fits.h"
#include "posenc/train/trainer.h"
#include "posenc/tasks/task.h"
#include "posenc/train/decode.h"
#include "posenc/train/objective.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::config_error;
using posenc::testing::config_with;
using posenc::testing::error_of;

namespace {

std::unique_ptr<Task> addition(const std::string& positions, int64_t offset = 0) {
  const Config c =
      config_with({"model.kind=\"decoder\"", "model.positional.type=\"learned\"", "task.type=\"addition\"",
                   "task.positions=\"" + positions + "\"", "task.position_offset=" + std::to_string(offset)});
  return find_task("addition").make(c.task);
}

std::vector<int64_t> row_of(const torch::Tensor& t, int64_t r) {
  auto row = t[r].contiguous();
  return {row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()};
}

/// A decoder on addition whose scheme is `scheme`, reading `positions`.
Config decoder_config(const std::string& scheme, const std::string& positions) {
  return config_with({"model.kind=\"decoder\"", "model.d_model=32", "model.heads=2", "model.layers=2", "model.d_ff=64",
                      "model.positional.type=\"" + scheme + "\"", "task.type=\"addition\"",
                      "task.positions=\"" + positions + "\"", "eval.lengths=[4,8]"});
}

// a + b SEP s for 3-digit operands: 3 + 1 + 3 + 1 + 4 tokens.
TEST(TaskPositions, AbacusCountsEachDigitInsideItsNumber) {
  const auto set = addition("abacus")->fixed_set(3, 4, 7);
  ASSERT_TRUE(set.positions.defined());
  ASSERT_EQ(set.positions.sizes(), set.tokens.sizes());
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(row_of(set.positions, r), (std::vector<int64_t>{1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4})) << "row " << r;
}

TEST(TaskPositions, CouplingGivesEqualSignificanceOneIdAndTheTokenThatPredictsADigitItsId) {
  const auto set = addition("coupled")->fixed_set(3, 4, 7);
  ASSERT_TRUE(set.positions.defined());
  // a0 a1 a2 + b0 b1 b2 SEP s0 s1 s2 s3: units 1, tens 2, hundreds 3; SEP predicts
  // s0 (units), s0 predicts s1 (tens), ...; s3 is never fed.
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(row_of(set.positions, r), (std::vector<int64_t>{1, 2, 3, 0, 1, 2, 3, 1, 2, 3, 4, 5})) << "row " << r;
}

TEST(TaskPositions, TrainingOffsetsStayInRangeAndLeaveTheTokensAlone) {
  const auto plain = addition("sequence")->train_batch(5, 64, 0);
  EXPECT_FALSE(plain.positions.defined()) << "sequence positions are the model's own 0..T-1";
  for (const std::string mode : {"abacus", "coupled"}) {
    SCOPED_TRACE(mode);
    const auto task = addition(mode, 10);
    const auto batch = task->train_batch(5, 64, 0);
    EXPECT_TRUE(torch::equal(batch.tokens, plain.tokens)) << "the offsets draw from a stream of their own";
    const int64_t n = (batch.tokens.size(1) - 3) / 3;       // T = 3n + 3
    const auto base = task->fixed_set(n, 64, 0).positions;  // offset 0: evaluation
    const auto nonzero = base.gt(0);
    const auto shift = (batch.positions - base).masked_select(nonzero);
    EXPECT_GE(shift.min().item<int64_t>(), 0);
    EXPECT_LE(shift.max().item<int64_t>(), 10);
    EXPECT_TRUE(torch::equal(batch.positions.masked_select(nonzero.logical_not()),
                             torch::zeros_like(batch.positions.masked_select(nonzero.logical_not()))))
        << "'+' (and abacus's SEP) stay at 0";
    // abacus draws one k per batch, coupling one start per example.
    const auto per_row = std::get<0>(shift.view({64, -1}).min(1)).contiguous();
    const std::set<int64_t> distinct(per_row.data_ptr<int64_t>(), per_row.data_ptr<int64_t>() + 64);
    if (mode == "abacus")
      EXPECT_EQ(distinct.size(), 1u);
    else
      EXPECT_GT(distinct.size(), 3u);
  }
}

/// The overrides of a decoder on addition whose input slot holds `input`
/// beside `scheme` in attention.
std::vector<std::string> pair_options(const std::string& scheme, const std::string& input,
                                      const std::string& positions) {
  return {"model.kind=\"decoder\"",
          "model.d_model=32",
          "model.heads=2",
          "model.layers=2",
          "model.d_ff=64",
          "model.positional.type=\"" + scheme + "\"",
          "model.positional.input=\"" + input + "\"",
          "task.type=\"addition\"",
          "task.positions=\"" + positions + "\"",
          "eval.lengths=[4,8]"};
}

std::vector<std::string> with_task_ids(std::vector<std::string> options, const std::string& task_ids) {
  options.push_back("model.positional.task_ids=\"" + task_ids + "\"");
  return options;
}

Config pair_config(const std::string& scheme, const std::string& input, const std::string& positions) {
  return config_with(pair_options(scheme, input, positions));
}

/// The model of `c` reads a task's ids: rows of 0..L-1 give what the model's own
/// count gives, each row is read as its own, the ids matter (unless `ids_matter`
/// is false), a KV cache decodes what the whole sequence computes, and greedy
/// decoding reads the answer's ids.
void expect_reads_task_ids(const Config& c, bool ids_matter) {
  torch::manual_seed(0);
  Decoder model(c.model, task_vocab_size(c.task));
  model->eval();
  torch::NoGradGuard no_grad;
  const auto set = find_task("addition").make(c.task)->fixed_set(4, 3, 1);  // (3, 15)
  const auto tokens = set.tokens;
  const int64_t B = tokens.size(0), T = tokens.size(1);
  // Rows of 0..T-1 are the model's own count.
  const auto counted = torch::arange(T, torch::kLong).expand({B, T}).contiguous();
  EXPECT_TRUE(torch::allclose(model->forward(tokens, {}, counted), model->forward(tokens), tolerance::kFloat32Model,
                              tolerance::kFloat32Model));
  // Each row is read with its own ids: as a batch of one.
  const auto ids = set.positions.clone();
  ids[1] += 5;                                           // another row, other ids
  const auto batched = model->forward(tokens, {}, ids);  // (B, T, V+2)
  for (int64_t r = 0; r < B; ++r)
    EXPECT_TRUE(torch::allclose(batched[r], model->forward(tokens.narrow(0, r, 1), {}, ids.narrow(0, r, 1))[0],
                                tolerance::kFloat32Model, tolerance::kFloat32Model))
        << "row " << r;
  if (ids_matter) {  // the task's ids against the model's own count (a shift alone moves no relative bias)
    EXPECT_FALSE(torch::allclose(batched, model->forward(tokens), tolerance::kFloat32Model, tolerance::kFloat32Model))
        << "the ids must matter";
  }
  // A KV cache, one token at a time, decodes what the whole sequence computes.
  if (model->supports_kv_cache()) {
    KVCache cache;
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t < T; ++t) steps.push_back(model->decode(tokens.narrow(1, t, 1), cache, ids.narrow(1, t, 1)));
    EXPECT_TRUE(torch::allclose(torch::cat(steps, 1), batched, tolerance::kFloat32Model, tolerance::kFloat32Model));
  }
  // Greedy decoding from the prompt reads the answer's ids too.
  const int64_t a = set.answer_start, A = T - a;
  Sampling greedy;
  greedy.positions = ids;
  Transformer any_kind = model;
  const auto decoded = continue_tokens(any_kind, tokens.narrow(1, 0, a), A, greedy);  // (B, A)
  auto teacher = tokens.narrow(1, 0, a).clone();
  for (int64_t t = 0; t < A; ++t) {  // the same, one whole forward per token
    const auto logits = model->forward(teacher, {}, ids.narrow(1, 0, teacher.size(1)));
    teacher = torch::cat({teacher, logits.select(1, -1).argmax(-1, true)}, 1);
  }
  EXPECT_TRUE(torch::equal(decoded, teacher.narrow(1, a, A)));
}

}  // namespace

// Every scheme reads a task's ids, alone (the schemes that add them to the
// residual stream) or beside a learned table in the input slot that reads them
// (the schemes that act in attention, over 0..L-1); a scheme that can do
// neither is refused when the config is read.
class EverySchemeWithTaskPositions : public ::testing::TestWithParam<std::string> {};

TEST_P(EverySchemeWithTaskPositions, ReadsEachRowsIdsOrIsRefusedAtConfigTime) {
  const std::string scheme = GetParam();
  const SchemeInfo& info = find_scheme(scheme);
  if (info.reads_task_positions) {
    SCOPED_TRACE(scheme + " alone");
    expect_reads_task_ids(decoder_config(scheme, "coupled"), scheme != "none");
  } else {
    const std::string error = error_of([&] { decoder_config(scheme, "coupled"); });
    EXPECT_NE(error.find("model.positional.type=" + scheme + " cannot read the position ids task.positions=coupled"),
              std::string::npos)
        << error;
  }
  if (info.default_placement == Placement::EveryLayer) {
    SCOPED_TRACE(scheme + " beside model.positional.input=learned");
    expect_reads_task_ids(pair_config(scheme, "learned", "abacus"), true);
  }
}

// An attention scheme that reads a task's ids gives, row by row, what those
// ids give as the scheme's own positions: a bias, a rotation of q and k, or a
// reweighting of the scores that is a function of the two ids of each
// (query, key) pair, whatever order the ids come in; the causal mask is not
// its business.
TEST_P(EverySchemeWithTaskPositions, EachRowsAttentionTermIsThatOfItsIds) {
  const std::string scheme = GetParam();
  const SchemeInfo& info = find_scheme(scheme);
  auto s = posenc::testing::scheme_with(scheme, {16, 2, 8, 0, true}, json::object());
  const Capabilities caps = s->capabilities();
  if (!info.reads_task_positions || !(caps.bias || caps.rotate || caps.reweight))
    GTEST_SKIP() << "no attention term over task ids";
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const auto q = torch::randn({2, 2, 11, 8}), k = torch::randn({2, 2, 11, 8});  // (B, H, L, Dh)
  const auto scores = torch::randn({2, 2, 11, 11});                             // (B, H, Lq, Lk)
  // The scheme's term for rows [r, r + n) of the inputs above: (n, H, 11, ...).
  const auto term = [&](const Positions& pos, int64_t r, int64_t n) {
    if (caps.bias) return s->bias(pos).expand({n, 2, 11, 11});
    if (caps.reweight) return s->reweight(scores.narrow(0, r, n), pos);
    auto qr = q.narrow(0, r, n), kr = k.narrow(0, r, n);
    s->rotate(qr, kr, pos);
    return torch::cat({qr, kr}, -1);
  };
  const auto ids = torch::tensor({1, 2, 3, 0, 1, 2, 3, 1, 2, 3, 4, 6, 7, 0, 6, 7, 8, 6, 7, 8, 9, 10}, torch::kLong)
                       .view({2, 11});  // two rows of coupled ids, the second shifted by 5
  const auto count = torch::arange(11, torch::kLong);
  Positions batched{count, count, 11};
  batched.task_q = batched.task_k = ids;
  batched.task_end = 11;
  const auto both = term(batched, 0, 2);
  ASSERT_EQ(both.size(0), 2);
  for (int64_t r = 0; r < 2; ++r) {
    const auto row = ids[r].contiguous();
    const auto own = term(Positions{row, row, row.max().item<int64_t>() + 1}, r, 1);
    EXPECT_TRUE(torch::allclose(both[r], own[0], tolerance::kFloat32Sum, tolerance::kFloat32Sum)) << "row " << r;
  }
  EXPECT_FALSE(torch::allclose(both[0], term(Positions{count, count, 11}, 0, 1)[0], tolerance::kFloat32Sum,
                               tolerance::kFloat32Sum))
      << "the ids, not the count, must decide the term";
}

// With model.positional.task_ids "both", the scheme in attention reads the
// ids the input slot reads: with the input table at zero, the pair computes
// what the scheme alone computes over those ids; with "input" (the default),
// what it computes over the model's own count.
TEST_P(EverySchemeWithTaskPositions, BesideTheInputSlotReadsTheIdsTooWhenTaskIdsIsBoth) {
  const std::string scheme = GetParam();
  const SchemeInfo& info = find_scheme(scheme);
  if (info.default_placement != Placement::EveryLayer)
    GTEST_SKIP() << "not a scheme for attention beside the input slot";
  if (!info.reads_task_positions) {
    const std::string error =
        error_of([&] { config_with(with_task_ids(pair_options(scheme, "learned", "coupled"), "both")); });
    EXPECT_NE(error.find("model.positional.type=" + scheme + " cannot read the position ids task.positions=coupled"),
              std::string::npos)
        << error;
    return;
  }
  const Config both = config_with(with_task_ids(pair_options(scheme, "learned", "coupled"), "both"));
  SCOPED_TRACE(scheme + " beside model.positional.input=learned, task_ids=both");
  expect_reads_task_ids(both, true);
  // The scheme alone over the ids, and alone over its own count (its causal
  // options then, as beside an input slot that keeps the ids).
  const Config input = pair_config(scheme, "learned", "coupled");
  const Config alone_with_ids = decoder_config(scheme, "coupled"), alone_counting = decoder_config(scheme, "sequence");
  torch::NoGradGuard no_grad;
  const auto set = find_task("addition").make(input.task)->fixed_set(4, 3, 1);  // (3, 15)
  for (const auto& [paired_config, alone_config, with_ids] :
       {std::tuple{&both, &alone_with_ids, true}, std::tuple{&input, &alone_counting, false}}) {
    torch::manual_seed(0);
    Decoder single(alone_config->model, task_vocab_size(alone_config->task));
    Decoder pair(paired_config->model, task_vocab_size(paired_config->task));
    single->eval(), pair->eval();
    const auto source = single->named_parameters();
    for (auto& p : pair->named_parameters()) {
      if (p.key().rfind("input_positional", 0) == 0) {
        p.value().zero_();  // the input slot adds nothing
        continue;
      }
      ASSERT_TRUE(source.contains(p.key())) << p.key();
      p.value().copy_(source[p.key()]);
    }
    const auto got = pair->forward(set.tokens, {}, set.positions);
    const auto expected = with_ids ? single->forward(set.tokens, {}, set.positions) : single->forward(set.tokens);
    EXPECT_TRUE(torch::allclose(got, expected, tolerance::kFloat32Model, tolerance::kFloat32Model))
        << "task_ids=" << paired_config->model.positional.task_ids;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, EverySchemeWithTaskPositions, ::testing::ValuesIn(scheme_names()),
                         [](const auto& info) { return info.param; });

TEST(TaskPositions, ConfigsThatCannotReadThemAreRefusedNamingTheKey) {
  const auto error = [](std::initializer_list<std::string> extra) {
    std::vector<std::string> o = {"model.kind=\"decoder\"", "model.positional.type=\"learned\"",
                                  "task.type=\"addition\"", "task.positions=\"abacus\"", "eval.lengths=[8,40]"};
    o.insert(o.end(), extra.begin(), extra.end());
    return error_of([&] {
      json j = json::object();
      for (const auto& s : o) apply_override(j, s);
      config_from_json(j);
    });
  };
  EXPECT_EQ(error({}), "(no error)");
  EXPECT_NE(error({"model.positional.max_positions=40"})
                .find("model.positional.max_positions=40: "
                      "task.positions=abacus gives length 40 ids up to 41"),
            std::string::npos);
  EXPECT_NE(error({"task.position_offset=100", "model.positional.max_positions=64"}).find("max_positions=64"),
            std::string::npos)
      << "training offsets count";
  EXPECT_NE(error({"model.kind=\"encoder_decoder\""})
                .find("task.positions=abacus: task-defined positions are read "
                      "by a decoder"),
            std::string::npos);
  EXPECT_NE(error({"model.positional.randomize.max_position=128"}).find("model.positional.randomize"),
            std::string::npos);
  EXPECT_NE(error({"task.positions=\"fancy\""}).find("task.positions: \"fancy\" is not one of"), std::string::npos);
}

// The sum's digits are close to uniform, so a model that learned only that the
// answer is digits scores ln 10 = 2.30 nats per token; one that reads the
// coupled ids and adds must go well below it.
TEST(TaskPositions, ADecoderLearnsToAddFromCoupledIds) {
  torch::manual_seed(0);
  Config c = decoder_config("learned", "coupled");
  c.task.min_length = 1, c.task.max_length = 3;
  Transformer model(c.model, task_vocab_size(c.task));
  const auto task = find_task("addition").make(c.task);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
  double last = 0;  // the mean loss of the last 50 steps
  const int64_t steps = 1000;
  for (int64_t step = 0; step < steps; ++step) {
    const auto batch = task->train_batch(step, 32, 0);
    const auto out = task_objective(model, batch);
    opt.zero_grad();
    out.loss.backward();
    opt.step();
    if (step >= steps - 50) last += out.loss.item<double>() / 50;
  }
  EXPECT_LT(last, 0.5 * std::log(10.0)) << "mean loss of the last 50 steps " << last;
}

TEST(SchemePair, AMeaninglessPairIsRefusedWithBothNames) {
  const auto error = [](std::initializer_list<std::string> o) { return config_error(o); };
  EXPECT_EQ(error({"model.positional.type=\"fire\"", "model.positional.input=\"learned\""}), "(no error)");
  EXPECT_NE(error({"model.positional.type=\"fire\"", "model.positional.input=\"rope\""})
                .find("model.positional.input=rope acts in attention"),
            std::string::npos);
  EXPECT_NE(error({"model.positional.type=\"sinusoidal\"", "model.positional.input=\"learned\""})
                .find("model.positional.input=learned with model.positional.type=sinusoidal: both would add"),
            std::string::npos);
  EXPECT_NE(error({"model.kind=\"encoder_decoder\"", "task.type=\"scan\"", "model.positional.input=\"learned\""})
                .find("model.positional.input: a second scheme at the input is for an encoder or a decoder"),
            std::string::npos);
  EXPECT_NE(error({"model.positional.input={\"type\": \"learned\", \"max_positions\": 0}"})
                .find("model.positional.input.max_positions"),
            std::string::npos)
      << "the input scheme's options are checked against its registry entry";
  EXPECT_NE(error({"model.kind=\"decoder\"", "model.positional.type=\"xpos\"", "task.type=\"addition\"",
                   "task.positions=\"abacus\""})
                .find("model.positional.type=xpos cannot read the position ids task.positions=abacus defines; "
                      "schemes that can: none, sinusoidal, learned, rope, alibi, t5, kerple, fire, dape (or put "
                      "sinusoidal or learned in model.positional.input"),
            std::string::npos);
  EXPECT_NE(error({"model.kind=\"decoder\"", "model.positional.type=\"fire\"", "task.type=\"addition\"",
                   "task.positions=\"abacus\"", "model.positional.input={\"type\": \"learned\", \"max_positions\": 16}",
                   "eval.lengths=[8,40]"})
                .find("model.positional.input.max_positions=16: task.positions=abacus gives length 40"),
            std::string::npos);
  EXPECT_NE(error({"model.positional.input=\"learned\"", "model.attention.qkv=\"embedded\"",
                   "model.positional.type=\"alibi\""})
                .find("model.positional.input=learned"),
            std::string::npos);
}

TEST(SchemePair, TaskIdsIsRefusedWhereItWouldDoNothing) {
  const auto error = [](std::vector<std::string> o) { return error_of([&] { config_with(o); }); };
  EXPECT_EQ(error(with_task_ids(pair_options("kerple", "learned", "coupled"), "both")), "(no error)");
  EXPECT_NE(
      error(with_task_ids(pair_options("kerple", "learned", "coupled"), "every")).find("model.positional.task_ids"),
      std::string::npos);
  auto alone = with_task_ids(pair_options("kerple", "none", "coupled"), "both");
  EXPECT_NE(error(alone).find("model.positional.task_ids: says which of two slots reads a task's position ids, but "
                              "model.positional.input is none"),
            std::string::npos)
      << error(alone);
  const auto sequence = error(with_task_ids(pair_options("kerple", "learned", "sequence"), "both"));
  EXPECT_NE(sequence.find("model.positional.task_ids=both: the task defines no position ids"), std::string::npos)
      << sequence;
}

TEST(SchemePair, ThePairIsWrittenIntoTheRunsConfigAndReadBack) {
  const Config both = config_with(with_task_ids(pair_options("kerple", "learned", "coupled"), "both"));
  EXPECT_EQ(config_to_json(both)["model"]["positional"]["task_ids"], "both");
  EXPECT_EQ(config_from_json(config_to_json(both)).model.positional.task_ids, posenc::TaskIds::Both);
  const Config c = pair_config("fire", "learned", "abacus");
  const json written = config_to_json(c);
  EXPECT_EQ(written["model"]["positional"]["input"]["type"], "learned");
  EXPECT_EQ(config_to_json(config_from_json(written)), written);
  Transformer model(c.model, task_vocab_size(c.task));
  bool has_input_table = false;
  for (const auto& p : model->named_parameters()) has_input_table |= p.key().rfind("input_positional", 0) == 0;
  EXPECT_TRUE(has_input_table) << "the input slot's learned table is a parameter of the model";
}

// Sinusoids in the input slot beside no scheme in attention are the sinusoidal
// scheme alone: the same parameters, the same logits, with the model's own
// count and with a task's ids.
TEST(SchemePair, SinusoidsInTheInputSlotBesideNoneAreTheSinusoidalScheme) {
  for (const std::string positions : {"sequence", "coupled"}) {
    SCOPED_TRACE(positions);
    const Config alone = decoder_config("sinusoidal", positions);
    const Config pair = pair_config("none", "sinusoidal", positions);
    torch::manual_seed(0);
    Decoder a(alone.model, task_vocab_size(alone.task));
    torch::manual_seed(0);
    Decoder b(pair.model, task_vocab_size(pair.task));
    a->eval(), b->eval();
    torch::NoGradGuard no_grad;
    const auto set = find_task("addition").make(alone.task)->fixed_set(5, 4, 2);
    EXPECT_TRUE(torch::equal(a->forward(set.tokens, {}, set.positions), b->forward(set.tokens, {}, set.positions)));
  }
}

// posenc attention on a run with task-defined ids shows the maps of the model
// reading them, as training and evaluation do, and says which ids they were.
TEST(TaskPositions, AttentionMapsReadTheTasksIds) {
  const auto dir = posenc::testing::fresh_dir("task_positions_attention");
  Config c = decoder_config("learned", "coupled");
  c.train.steps = 5, c.train.log_every = 5, c.train.eval_every = 5, c.train.val_samples = 10;
  c.eval.samples_per_length = 10;
  c.train.out_dir = dir.string();
  train(c, TrainRequest{});
  const std::string ckpt = (dir / "checkpoint.pt").string();
  AttentionRequest request;
  request.length = 3;
  const auto att = attention_example(ckpt, request);
  const auto set = find_task("addition").make(c.task)->fixed_set(3, 1, c.eval.seed);
  const int64_t T = set.tokens.size(1);
  const auto ids = set.positions.narrow(1, 0, T - 1);  // (1, T-1): the ids of what the model reads
  EXPECT_EQ(att.at("task_positions").get<std::vector<int64_t>>(), row_of(ids, 0));
  // The first block's maps are those of the model run on the example with those ids.
  Transformer model = load_model_as(ckpt, torch::kCPU, read_checkpoint_config(ckpt));
  model->eval();
  model->keep_attention(true);
  model->force_explicit_attention(true);
  torch::NoGradGuard no_grad;
  model->as<DecoderImpl>()->forward(set.tokens.narrow(1, 0, T - 1), {}, ids);
  const auto expected = model->attention_maps().front()[0];  // (H, T-1, T-1)
  const auto& block = att.at("layers").at(0);
  for (int64_t h = 0; h < expected.size(0); ++h)
    for (int64_t q = 0; q < T - 1; ++q)
      for (int64_t k = 0; k < T - 1; ++k)
        ASSERT_NEAR(block.at(h).at(q).at(k).get<double>(), expected[h][q][k].item<double>(), tolerance::kFloat32Model)
            << "head " << h << " query " << q << " key " << k;
  std::filesystem::remove_all(dir);
}

// A table is bounded by the task's largest id, not by the sequence's tokens: a
// 20-digit coupled sum is 63 tokens, its ids reach 23, and 32 rows hold it;
// a table read over 0..L-1 does not.
TEST(TaskPositions, ATableNeedsRowsForTheTasksIdsNotForEveryToken) {
  const Config coupled =
      config_with({"model.kind=\"decoder\"", "model.d_model=16", "model.heads=2", "model.layers=1", "model.d_ff=32",
                   "model.positional.type=\"learned\"", "model.positional.max_positions=32", "task.type=\"addition\"",
                   "task.positions=\"coupled\"", "task.max_length=5", "eval.lengths=[20]"});
  Transformer model(coupled.model, task_vocab_size(coupled.task));
  const auto task = find_task("addition").make(coupled.task);
  EXPECT_EQ(error_of([&] { check_evaluation_fits(model, *task, evaluation_spec(coupled), {20}, torch::kCPU); }),
            "(no error)");
  Config counted = coupled;
  counted.task = config_with({"model.kind=\"decoder\"", "task.type=\"addition\"", "task.max_length=5"}).task;
  const auto plain = find_task("addition").make(counted.task);
  EXPECT_NE(error_of([&] {
              check_evaluation_fits(model, *plain, evaluation_spec(counted), {20}, torch::kCPU);
            }).find("encodes at most 32"),
            std::string::npos);
}

}  // namespace POSENC_TEST_UNIT
