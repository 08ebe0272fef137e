// The encoder_decoder over every registered scheme (causality of the target,
// source padding, the KV cache, greedy and beam decoding), its cross-attention
// option, SCAN's grammar and splits, and short runs that must learn.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/errors.h"
#include "posenc/model/transformer.h"
#include "posenc/model/encoder_decoder.h"
#include "posenc/tasks/scan.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/decode.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/fits.h"
#include "posenc/train/objective.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

Config encoder_decoder_config(const std::string& scheme, std::initializer_list<std::string> extra = {}) {
  return posenc::testing::small_next_token_config("encoder_decoder", scheme, extra);
}

EncoderDecoder random_model(const Config& cfg, uint64_t seed) {
  return posenc::testing::random_positional_model<EncoderDecoder>(cfg.model, seed);
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

/// Summed log-probability of `answer` (A) after `prompt` (1, P), teacher-forced.
double answer_log_prob(Transformer& model, const torch::Tensor& prompt, const std::vector<int64_t>& answer) {
  c10::InferenceMode guard;
  auto tokens = torch::cat({prompt, torch::tensor(answer, torch::kLong).unsqueeze(0)}, 1);  // (1, P + A)
  auto logp = torch::log_softmax(
      next_token_model(model, "the test").answer_logits(tokens, prompt.size(1)).to(torch::kDouble), -1)[0];  // (A, V)
  double sum = 0;
  for (size_t i = 0; i < answer.size(); ++i) sum += logp[static_cast<int64_t>(i)][answer[i]].item<double>();
  return sum;
}

}  // namespace

class EverySchemeInEncoderDecoder : public ::testing::TestWithParam<std::string> {};

TEST_P(EverySchemeInEncoderDecoder, LaterTargetTokensDoNotChangeEarlierLogits) {
  auto model = random_model(encoder_decoder_config(GetParam()), 1);
  torch::NoGradGuard no_grad;
  auto source = torch::randint(1, 17, {3, 9}, torch::kLong), target = torch::randint(1, 17, {3, 12}, torch::kLong);
  auto changed = target.clone();
  changed.narrow(1, 7, 5).random_(1, 17);
  const auto a = model->forward(source, target), b = model->forward(source, changed);  // (3, 12, 18)
  EXPECT_LT(max_difference(a.narrow(1, 0, 7), b.narrow(1, 0, 7)), tolerance::kFloat32Sum);
  EXPECT_GT(max_difference(a.narrow(1, 7, 5), b.narrow(1, 7, 5)), tolerance::kFloat32Sum);
  // The decoder reads the source: another source changes every position.
  const auto c = model->forward(torch::randint(1, 17, {3, 9}, torch::kLong), target);
  EXPECT_GT(max_difference(a.narrow(1, 0, 1), c.narrow(1, 0, 1)), tolerance::kFloat32Sum);
}

TEST_P(EverySchemeInEncoderDecoder, SourcePaddingChangesNothing) {
  auto model = random_model(encoder_decoder_config(GetParam()), 2);
  if (!model->supports_kv_cache())
    GTEST_SKIP() << "the scheme's encoding depends on the sequence's length, which padding changes";
  torch::NoGradGuard no_grad;
  auto source = torch::randint(1, 17, {2, 7}, torch::kLong), target = torch::randint(1, 17, {2, 6}, torch::kLong);
  auto padded = torch::cat({source, torch::zeros({2, 4}, torch::kLong)}, 1);  // (2, 11)
  EXPECT_LT(max_difference(model->forward(source, target), model->forward(padded, target)), tolerance::kFloat32Model);
}

TEST_P(EverySchemeInEncoderDecoder, KvCacheGivesTheWholeTargetsLogits) {
  auto model = random_model(encoder_decoder_config(GetParam()), 3);
  if (!model->supports_kv_cache()) GTEST_SKIP() << "decodes by rerunning the whole target";
  torch::NoGradGuard no_grad;
  auto source = torch::randint(1, 17, {2, 8}, torch::kLong), target = torch::randint(1, 17, {2, 10}, torch::kLong);
  source[1][6] = 0, source[1][7] = 0;                 // a shorter second source
  const auto whole = model->forward(source, target);  // (2, 10, 18)
  KVCache cache;
  const auto cached = posenc::testing::cached_target_logits(model, source, target, 3, cache);
  EXPECT_EQ(cache.length, 10);
  EXPECT_LT(max_difference(cached, whole), tolerance::kFloat32Model);
}

TEST_P(EverySchemeInEncoderDecoder, GreedyIsBeamOneAndReproducesItsOwnAnswers) {
  const Config cfg = encoder_decoder_config(GetParam());
  Transformer model = random_model(cfg, 4);
  const auto task = make_task(cfg.task);
  TaskBatch set = task->fixed_set(5, 4, 5);
  const int64_t a = set.answer_start, A = set.tokens.size(1) - a;
  const auto answers = continue_tokens(model, set.tokens.narrow(1, 0, a), A);  // (4, A)
  for (int64_t r = 0; r < 4; ++r) {
    const auto beam = beam_search(model, set.tokens.narrow(0, r, 1).narrow(1, 0, a), A, BeamOptions{1, 0, 0});
    ASSERT_EQ(beam.size(), 1u);
    const auto greedy = answers[r].contiguous();
    EXPECT_EQ(beam[0].tokens, std::vector<int64_t>(greedy.data_ptr<int64_t>(), greedy.data_ptr<int64_t>() + A));
  }
  set.tokens.narrow(1, a, A).copy_(answers);
  const auto [exact, tokens] = score_decoding(model, set, torch::kCPU, 1 << 16);
  EXPECT_EQ(exact.correct, 4);
  EXPECT_EQ(tokens.correct, tokens.n);  // a random model may emit padding, which is never scored
}

INSTANTIATE_TEST_SUITE_P(Registry, EverySchemeInEncoderDecoder, ::testing::ValuesIn(scheme_names()),
                         [](const auto& info) { return info.param; });

TEST(EncoderDecoder, CrossAttentionTakesASchemeThatActsInAttentionOnly) {
  torch::NoGradGuard no_grad;
  auto source = torch::randint(1, 17, {2, 6}, torch::kLong), target = torch::randint(1, 17, {2, 5}, torch::kLong);
  const Config plain = encoder_decoder_config("rope");
  EXPECT_EQ(plain.model.positional.cross, "none");
  const Config with_t5 = encoder_decoder_config("rope", {"model.positional.cross=t5"});
  EXPECT_EQ(with_t5.model.positional.cross_options.at("bidirectional"), true);  // nothing is masked there
  auto a = random_model(plain, 5), b = random_model(with_t5, 5);
  EXPECT_GT(max_difference(a->forward(source, target), b->forward(source, target)), tolerance::kFloat32Value);
  // Options of the cross scheme, as an object.
  const Config alibi =
      encoder_decoder_config("rope", {"model.positional.cross={\"type\": \"alibi\", \"directional\": true}"});
  EXPECT_EQ(alibi.model.positional.cross, "alibi");
  EXPECT_EQ(alibi.model.positional.cross_options.at("directional"), true);
  // A scheme that only adds to the residual stream has nothing to act on there.
  try {
    Transformer bad(encoder_decoder_config("rope", {"model.positional.cross=sinusoidal"}).model, 16);
    ADD_FAILURE() << "sinusoidal accepted in cross-attention";
  } catch (const IncompatibleConfig& e) {
    EXPECT_NE(std::string(e.what()).find("model.positional.cross=sinusoidal"), std::string::npos) << e.what();
  }
  // Schemes that relate a query to the keys of its own sequence have no such keys there (the source's are
  // another sequence's), even where the two lengths happen to be equal.
  for (const std::string own : {"cope", "fox"}) {
    try {
      Transformer bad(encoder_decoder_config("rope", {"model.positional.cross=" + own}).model, 16);
      ADD_FAILURE() << own << " accepted in cross-attention";
    } catch (const IncompatibleConfig& e) {
      EXPECT_NE(std::string(e.what()).find("model.positional.cross=" + own), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("own sequence"), std::string::npos) << e.what();
    }
  }
  // Cross-attention exists in an encoder_decoder only; an unknown scheme is named.
  EXPECT_THROW(config_from_json(json::parse(R"({"model": {"kind": "decoder", "positional": {"cross": "t5"}},
                                               "task": {"type": "copy"}})")),
               ConfigError);
  try {
    encoder_decoder_config("rope", {"model.positional.cross=\"nope\""});
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.positional.cross"), std::string::npos) << e.what();
  }
}

TEST(EncoderDecoder, TheDecoderTakesTheCausalValueOfDirectionalOptions) {
  const Config cfg = encoder_decoder_config("t5");
  EXPECT_EQ(cfg.model.positional.options.at("bidirectional"), true);  // the encoder's own
  auto model = random_model(cfg, 6);
  // A one-sided decoder: later target tokens still change nothing before them (checked per scheme above);
  // here the decoder's instance is a different one from the encoder's.
  int instances = 0;
  for (const auto& p : model->named_children())
    if (p.key().find("positional") != std::string::npos) ++instances;
  EXPECT_EQ(instances, 2) << "one for the encoder, one for the decoder";
}

TEST(EncoderDecoder, KindsEmbeddedQkvAndRandomizedPositionsAreCheckedUpFront) {
  const auto error = [](std::initializer_list<std::string> extra) {
    try {
      encoder_decoder_config("rope", extra);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error({"model.attention.qkv=embedded"}).find("encoder_decoder"), std::string::npos);
  EXPECT_NE(error({"model.positional.randomize={\"max_position\": 64}"}).find("randomize"), std::string::npos);
  EXPECT_NE(error({"task.type=ordering"}).find("model.kind=encoder_decoder"), std::string::npos);
  // SCAN trains an encoder_decoder only, and says so to a decoder.
  json j = json::object();
  apply_override(j, "model.kind=decoder");
  apply_override(j, "task.type=scan");
  try {
    config_from_json(j);
    ADD_FAILURE() << "scan accepted with a decoder";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("task.type=scan trains encoder_decoder"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.kind=decoder"), std::string::npos) << e.what();
  }
}

TEST(Scan, TheGrammarGivesThePublishedCountsAndSplits) {
  const auto all = scan_commands();
  std::set<std::string> distinct;
  for (const auto& e : all) distinct.insert(join_words(e.command));
  EXPECT_EQ(all.size(), 20910u);
  EXPECT_EQ(distinct.size(), 20910u);
  size_t short_ones = 0;
  std::set<size_t> long_lengths;
  for (const auto& e : all) {
    if (e.actions.size() <= 22)
      ++short_ones;
    else
      long_lengths.insert(e.actions.size());
  }
  EXPECT_EQ(short_ones, 16990u);
  EXPECT_EQ(all.size() - short_ones, 3920u);
  EXPECT_EQ(long_lengths, (std::set<size_t>{24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48}));
}

TEST(Scan, CommandsMeanWhatTheInterpretationSays) {
  std::map<std::string, std::string> meaning;
  for (const auto& e : scan_commands()) meaning[join_words(e.command)] = join_words(e.actions);
  // Derived by hand from the interpretation rules.
  EXPECT_EQ(meaning.at("walk"), "WALK");
  EXPECT_EQ(meaning.at("turn left"), "LTURN");
  EXPECT_EQ(meaning.at("jump right"), "RTURN JUMP");
  EXPECT_EQ(meaning.at("jump opposite left"), "LTURN LTURN JUMP");
  EXPECT_EQ(meaning.at("turn opposite right"), "RTURN RTURN");
  EXPECT_EQ(meaning.at("look around right"), "RTURN LOOK RTURN LOOK RTURN LOOK RTURN LOOK");
  EXPECT_EQ(meaning.at("turn around left"), "LTURN LTURN LTURN LTURN");
  EXPECT_EQ(meaning.at("run twice"), "RUN RUN");
  EXPECT_EQ(meaning.at("jump twice after walk left"), "LTURN WALK JUMP JUMP");
  EXPECT_EQ(meaning.at("walk and look thrice"), "WALK LOOK LOOK LOOK");
  EXPECT_EQ(meaning.at("jump opposite left after walk around left"),
            "LTURN WALK LTURN WALK LTURN WALK LTURN WALK LTURN LTURN JUMP");
  EXPECT_EQ(meaning.count("turn"), 0u);
  EXPECT_EQ(meaning.count("walk twice twice"), 0u);
}

TEST(Scan, SplitsSetsAndBadOptions) {
  const auto task_for = [](std::initializer_list<std::string> extra) {
    json j = json::object();
    apply_override(j, "model.kind=encoder_decoder");
    apply_override(j, "task.type=scan");
    for (const auto& e : extra) apply_override(j, e);
    return make_task(config_from_json(j).task);
  };
  const auto length = task_for({});
  EXPECT_EQ(length->longest_training_length(22), 22);
  // Test lengths come from the test split; every row ends its answer with EOS, then padding.
  const auto set = length->fixed_set(24, 5000, 0);
  EXPECT_GT(set.tokens.size(0), 0);
  EXPECT_TRUE(set.padded);
  const int64_t a = set.answer_start;
  EXPECT_TRUE(set.tokens.select(1, a - 1).eq(length->vocab_size() + 1).all().item<bool>());  // SEP
  EXPECT_TRUE(set.tokens.select(1, a + 24).eq(length->end_token()).all().item<bool>());
  EXPECT_EQ(length->decode_text(length->encode_text("jump twice")), "jump twice");
  // No command has 23 or 29 actions: evaluating there is an error, and a
  // validation set there (cutoff 26 validates on 2..26) is empty.
  EXPECT_THROW(length->check_eval_length(29), ConfigError);
  EXPECT_EQ(length->fixed_set(23, 10, 0).tokens.size(0), 0);
  EXPECT_EQ(length->fixed_set(23, 10, 0).tokens.size(1), length->sequence_length(23));
  EXPECT_THROW(length->encode_text("jump quickly"), ConfigError);
  // Training batches never hold a test command (longer than the cutoff).
  for (int64_t step = 0; step < 20; ++step) {
    const auto b = length->train_batch(step, 64, 1);
    const auto answers = b.tokens.narrow(1, b.answer_start, b.tokens.size(1) - b.answer_start);
    EXPECT_LE(answers.ne(0).sum(1).max().item<int64_t>(), 22 + 1);
  }
  EXPECT_EQ(task_for({"task.split=simple"})->longest_training_length(22), 48);
  EXPECT_EQ(task_for({"task.cutoff=26"})->longest_training_length(22), 26);
  const auto message = [&](std::initializer_list<std::string> extra) {
    try {
      task_for(extra);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({"task.split=\"addprim\""}).find("task.split"), std::string::npos);
  EXPECT_NE(message({"task.cutoff=48"}).find("leaves no command for the test set"), std::string::npos);
}

// eval.oracle_length: a model that gets every action right but ends too early
// scores 0 by exact match and 1 when it is given the length.
TEST(EncoderDecoder, GivenTheLengthAModelThatEndsEarlyIsScoredOnItsContent) {
  const Config cfg = posenc::testing::config_with(
      {"model.kind=encoder_decoder", "task.type=scan", "model.d_model=32", "model.heads=4", "model.layers=1",
       "model.decoder_layers=1", "model.d_ff=64", "model.positional.type=rope", "eval.oracle_length=true"});
  const auto task = make_task(cfg.task);
  const int64_t eos = task->end_token();
  torch::manual_seed(3);
  Transformer model(cfg.model, task->vocab_size());
  {  // The end token wins every step unless held back; padding and SEP never do.
    torch::NoGradGuard no_grad;
    auto bias = model->named_parameters()["head.bias"];
    bias.zero_();
    bias[eos] = 50.0;
    bias[0] = -50.0;
    bias[task->vocab_size() + 1] = -50.0;
  }
  TaskBatch set = task->fixed_set(6, 4, 5);                        // 4 commands of 6 actions
  const int64_t a = set.answer_start, A = set.tokens.size(1) - a;  // A = 6 actions + end
  const auto prompt = set.tokens.narrow(1, 0, a);

  // Plainly decoded, every answer ends at once; held back, row r ends exactly at hold_until[r].
  EXPECT_TRUE(continue_tokens(model, prompt, A).select(1, 0).eq(eos).all().item<bool>());
  Sampling held;
  held.hold_token = eos;
  held.hold_until = torch::tensor(std::vector<int64_t>{2, 4, 6, 5});
  const auto decoded = continue_tokens(model, prompt, A, held);  // (4, A)
  for (int64_t r = 0; r < 4; ++r) {
    const int64_t until = held.hold_until[r].item<int64_t>();
    EXPECT_FALSE(decoded[r].narrow(0, 0, until).eq(eos).any().item<bool>()) << "row " << r;
    EXPECT_EQ(decoded[r][until].item<int64_t>(), eos) << "row " << r;
  }

  // References that are the model's own answers at the right length.
  Sampling right_length;
  right_length.hold_token = eos;
  right_length.hold_until = torch::full({4}, A - 1, torch::kLong);
  set.tokens.narrow(1, a, A).copy_(continue_tokens(model, prompt, A, right_length));
  Tally oracle;
  DecodingDetails details;
  details.eos = eos;
  details.oracle = &oracle;
  const auto [exact, tokens] = score_decoding(model, set, torch::kCPU, 1 << 16, false, details);
  EXPECT_EQ(exact.n, 4);
  EXPECT_EQ(exact.correct, 0);
  EXPECT_EQ(oracle.n, 4);
  EXPECT_EQ(oracle.correct, 4);
  // Its wrong answers as a run keeps them: the command without padding or
  // SEP, the actions without the end token, and an empty answer, first wrong at once.
  Config keeping = cfg;
  keeping.eval.wrong_answers = 2;
  keeping.eval.samples_per_length = 8;
  const LengthResult kept = evaluate_lengths(model, *task, evaluation_spec(keeping), {6}, torch::kCPU).front();
  ASSERT_EQ(kept.wrong_answers.size(), 2u);
  const TaskBatch eight = task->fixed_set(6, 8, keeping.eval.seed);
  for (const auto& w : kept.wrong_answers) {
    const int64_t row = w["example"];
    const auto actions = eight.tokens[row].narrow(0, a, A - 1).contiguous();  // 6 actions, then the end token
    EXPECT_EQ(w["reference"], task->decode_text({actions.data_ptr<int64_t>(), actions.data_ptr<int64_t>() + A - 1}));
    EXPECT_NO_THROW(task->encode_text(w["prompt"])) << "a SCAN command: " << w.dump();
    EXPECT_EQ(w["answer"], "");
    EXPECT_EQ(w["first_wrong_token"], 0);
    // The end token's bias of 50 makes it all but certain, the reference's action all but impossible.
    EXPECT_EQ(w["first_wrong_choices"][0][0], task->decode_text({eos}));
    EXPECT_GT(w["first_wrong_choices"][0][1].get<double>(), 0.99);
    EXPECT_LT(w["right_token_probability"].get<double>(), 1e-6);
  }
  EXPECT_NE(format_wrong_answers({kept}).find("    answer     []\n"), std::string::npos)
      << format_wrong_answers({kept});

  // Without an end token there is nothing to hold back: the option is refused up front.
  const Config ordering = posenc::testing::config_with({"eval.oracle_length=true"});
  Transformer encoder(ordering.model, 64);
  const auto ordering_task = make_task(ordering.task);
  try {
    check_evaluation_fits(encoder, *ordering_task, evaluation_spec(ordering), {8}, torch::kCPU);
    ADD_FAILURE() << "eval.oracle_length accepted for the ordering task";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("eval.oracle_length"), std::string::npos) << e.what();
  }
}

TEST(EncoderDecoder, ShortRunLearnsToReverseAndBeamFourNeverScoresBelowGreedy) {
  const auto dir = posenc::testing::fresh_dir("encoder_decoder_learns");
  Config cfg = encoder_decoder_config(
      "rope",
      {"task.type=reverse", "task.vocab_size=8", "task.min_length=4", "task.max_length=8", "model.d_model=64",
       "train.lr=0.003", "train.steps=800", "train.batch_size=32", "train.warmup_steps=50", "train.log_every=100",
       "train.eval_every=800", "train.val_samples=200", "eval.lengths=[8]", "eval.samples_per_length=100"});
  cfg.train.out_dir = dir.string();
  const TrainResult result = train(cfg, TrainRequest{});
  EXPECT_GT(result.val_accuracy, 0.9) << "exact match in distribution (teacher-forced)";
  ASSERT_EQ(result.lengths.size(), 1u);
  EXPECT_GT(result.lengths[0].total.accuracy(), 0.8) << "exact match of greedy decoding at length 8";

  // Beam 4 against greedy on test examples, by the model's own log-probability.
  Config stored;
  auto model = load_model((dir / "checkpoint.pt").string(), torch::kCPU, &stored);
  const auto task = make_task(stored.task);
  const auto set = task->fixed_set(9, 30, 11);
  const int64_t a = set.answer_start, A = set.tokens.size(1) - a;
  int better = 0;
  for (int64_t r = 0; r < set.tokens.size(0); ++r) {
    const auto prompt = set.tokens.narrow(0, r, 1).narrow(1, 0, a);
    const auto greedy = continue_tokens(model, prompt, A)[0].contiguous();
    const double greedy_lp =
        answer_log_prob(model, prompt, {greedy.data_ptr<int64_t>(), greedy.data_ptr<int64_t>() + A});
    const auto beam = beam_search(model, prompt, A, BeamOptions{4, 0, 0});
    ASSERT_FALSE(beam.empty());
    // A sum of at most A log-probabilities of size <= 10, each through the model
    // (kFloat32Model relative) and added up in another order: A * 10 * 1e-4 ~ 1e-2
    // at worst; kFloat32Gradient (1e-3) holds with the answers' few tokens here.
    EXPECT_NEAR(beam[0].log_prob, answer_log_prob(model, prompt, beam[0].tokens), tolerance::kFloat32Gradient);
    EXPECT_GE(beam[0].log_prob, greedy_lp - tolerance::kFloat32Gradient) << "example " << r;
    better += beam[0].log_prob > greedy_lp + tolerance::kFloat32Gradient;
  }
  std::printf("beam 4 scored above greedy on %d of %ld examples\n", better, static_cast<long>(set.tokens.size(0)));
  std::filesystem::remove_all(dir);
}

// A long decoding polls the stop flag at every step: a signal ends a
// translation of a million tokens at the next one, not after the last.
TEST(EncoderDecoder, BeamSearchEndsAtTheNextStepOnceAStopIsRequested) {
  const Config cfg = encoder_decoder_config("rope");
  Transformer model = random_model(cfg, 0);
  const auto prompt = torch::tensor({3, 4, 5, 17}, torch::kLong).unsqueeze(0);  // (1, 4): a source and SEP
  {
    const InterruptGuard guard;
    ::raise(SIGTERM);  // the guard's handler only sets the flag
    EXPECT_THROW(beam_search(model, prompt, 1 << 20, BeamOptions{2, 0, 0}), Interrupted);
  }
  const InterruptGuard clear;  // the flag is cleared for the tests that follow
  EXPECT_EQ(beam_search(model, prompt, 3, BeamOptions{2, 0, 0}).front().tokens.size(), 3u);
}

TEST(EncoderDecoder, TrainEvalAndTranslateFromTheCommandLine) {
  posenc::testing::Scratch s("encoder_decoder_cli");
  const std::string run = s.path("run");
  const std::string tiny =
      " --set model.d_model=32 --set model.heads=4 --set model.layers=1 --set model.decoder_layers=1"
      " --set model.d_ff=64 --set train.steps=4 --set train.batch_size=16 --set train.val_samples=40"
      " --set train.log_every=2 --set eval.lengths=[24,48] --set eval.samples_per_length=20 --no-progress";
  auto r =
      posenc::testing::run_cli("train " + std::string(POSENC_SOURCE_DIR) + "/configs/scan.json --out " + run + tiny);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto results = read_json_file(run + "/results.json");
  EXPECT_EQ(results.at("metric"), "exact_match");
  EXPECT_EQ(results.at("lengths").at(1).at("length"), 48);
  EXPECT_EQ(results.at("lengths").at(1).at("beyond_training"), true);
  r = posenc::testing::run_cli("eval " + run + "/checkpoint.pt --lengths 8,40 --samples 10 --out " + s.path("e.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_json_file(s.path("e.json")).at("lengths").at(0).at("beyond_training"), false);
  // An untrained model's output is still a line of actions, greedy or from a beam.
  for (const std::string beam : {"1", "3"}) {
    r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --input \"jump twice after walk left\" --beam " +
                                 beam + " --max-tokens 6");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.find("error"), std::string::npos) << r.output;
  }
  // A file: one line out per line in; a bad word names its line.
  write_file_atomic(s.path("in.txt"), "walk\nlook twice\n");
  r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --file " + s.path("in.txt") + " --max-tokens 4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 2) << r.output;
  write_file_atomic(s.path("bad.txt"), "walk\nwalk quickly\n");
  r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --file " + s.path("bad.txt"));
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "bad.txt line 2: \"quickly\" is not a SCAN command word");
  r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "--input TEXT or --file FILE");
  // The file is read as every input is: a regular UTF-8 file (a byte-order mark
  // is no part of the first word), never a device that does not end or a pipe
  // that blocks.
  write_file_atomic(s.path("bom.txt"), "\xEF\xBB\xBFwalk\nlook\n");
  r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --file " + s.path("bom.txt") + " --max-tokens 4");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 2) << r.output;
  ASSERT_EQ(::mkfifo(s.path("fifo").c_str(), 0600), 0);
  for (const std::string& file : {std::string("/dev/zero"), s.path("fifo")}) {
    r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --file " + file, "timeout 60");
    EXPECT_EQ(r.code, 2) << file << ": " << r.output;
    posenc::testing::expect_one_line_error(r.output, "--file: cannot read " + file + ": not a regular file");
  }
  // A source too long to decode in memory is refused before the model runs.
  std::string huge = "walk";
  for (int i = 0; i < 125000; ++i) huge += " and walk";
  write_file_atomic(s.path("huge.txt"), "look\n" + huge + "\n");
  r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --file " + s.path("huge.txt"));
  EXPECT_EQ(r.code, 2) << r.output.substr(0, 2000);
  posenc::testing::expect_one_line_error(r.output,
                                         "huge.txt line 2: translating a source of 250002 tokens needs about");
  // NaN fails every comparison, so a plain range check would let it through.
  for (const std::string penalty : {"nan", "inf", "-1", "11"}) {
    r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --input walk --length-penalty " + penalty);
    EXPECT_EQ(r.code, 2) << penalty << ": " << r.output;
    EXPECT_NE(r.output.find("--length-penalty"), std::string::npos) << r.output;
  }
  // posenc attention: the encoder's maps over the source, and per decoder block its causal
  // self-attention over the target and its cross-attention to the source; every row a distribution.
  for (const std::string kind : {"bogus", "shuffle"}) {  // kinds are the ordering task's, not silently ignored
    r = posenc::testing::run_cli("attention " + run + "/checkpoint.pt --length 24 --kind " + kind);
    EXPECT_EQ(r.code, 2) << r.output;
    posenc::testing::expect_one_line_error(r.output, "--kind " + kind + ": the examples of task scan have no kinds");
  }
  r = posenc::testing::run_cli("attention " + run + "/checkpoint.pt --length 24 --index 2 --json " + s.path("a.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto att = read_json_file(s.path("a.json"));
  EXPECT_TRUE(att.at("encoder_decoder").get<bool>());
  const auto source = att.at("source").get<std::vector<std::string>>();
  const auto target = att.at("target").get<std::vector<std::string>>();
  ASSERT_GE(source.size(), 1u);
  EXPECT_LE(source.size(), 9u);   // a SCAN command has at most 9 words, without its padding
  ASSERT_EQ(target.size(), 25u);  // <sep> and the first 24 actions: the decoder's input for 24 actions and <eos>
  EXPECT_EQ(target.front(), "<sep>");
  for (const auto& w : target) EXPECT_NE(w, "<eos>");
  ASSERT_EQ(att.at("encoder").size(), 1u);
  ASSERT_EQ(att.at("decoder_self").size(), 1u);
  ASSERT_EQ(att.at("cross").size(), 1u);
  const auto check = [](const nlohmann::json& heads, size_t rows, size_t cols, bool causal) {
    ASSERT_EQ(heads.size(), 4u);
    for (const auto& head : heads) {
      ASSERT_EQ(head.size(), rows);
      for (size_t q = 0; q < rows; ++q) {
        const auto p = head[q].get<std::vector<double>>();
        ASSERT_EQ(p.size(), cols);
        double sum = 0;
        for (size_t k = 0; k < cols; ++k) {
          sum += p[k];
          if (causal && k > q) {
            EXPECT_EQ(p[k], 0.0) << "query " << q << " sees key " << k;
          }
        }
        EXPECT_NEAR(sum, 1.0, tolerance::kFloat32Value);
      }
    }
  };
  check(att["encoder"][0], source.size(), source.size(), false);
  check(att["decoder_self"][0], 25, 25, true);
  check(att["cross"][0], 25, source.size(), false);
  r = posenc::testing::run_cli("attention " + run + "/checkpoint.pt --length 23");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "SCAN has no command of 23 actions");
  // generate refuses an encoder_decoder, and translate anything else.
  r = posenc::testing::run_cli("generate " + run + "/checkpoint.pt --prompt walk");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "use posenc translate");
}

TEST(EncoderDecoder, ACompareGridOfEncoderDecoderRunsWritesItsSummaryAndReport) {
  posenc::testing::Scratch s("encoder_decoder_compare");
  const nlohmann::json grid = {{"base", std::string(POSENC_SOURCE_DIR) + "/configs/scan.json"},
                               {"set",
                                {{"model.d_model", 32},
                                 {"model.heads", 4},
                                 {"model.layers", 1},
                                 {"model.decoder_layers", 1},
                                 {"model.d_ff", 64},
                                 {"train.steps", 4},
                                 {"train.batch_size", 16},
                                 {"train.val_samples", 40},
                                 {"train.log_every", 2},
                                 {"train.eval_every", 4},
                                 {"train.checkpoint_every", 4},
                                 {"eval.lengths", {24, 48}},
                                 {"eval.samples_per_length", 10}}},
                               {"schemes", {"sinusoidal", "xl"}},
                               {"seeds", {0}}};
  write_file_atomic(s.path("grid.json"), grid.dump(2));
  const std::string out = s.path("out");
  const auto r =
      posenc::testing::run_cli("compare " + s.path("grid.json") + " --jobs 2 --no-figures --no-progress --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto summary = read_json_file(out + "/summary.json");
  EXPECT_EQ(summary.at("variants").size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(out + "/report.md"));
  // Each scheme's inspection and attention maps (on an example of the shortest evaluation length) are written.
  EXPECT_TRUE(std::filesystem::exists(out + "/inspect/xl-projected-max.json"));
  const auto attention = read_json_file(out + "/attention/xl-projected-max.json");
  EXPECT_EQ(attention.at("length"), 24);
  EXPECT_EQ(attention.at("target").size(), 25u);
}

}  // namespace POSENC_TEST_UNIT
