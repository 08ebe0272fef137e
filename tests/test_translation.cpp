// Corpus BLEU against hand-computed values, and the translation task on a
// parallel file: its vocabulary, held-out pairs, length split and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "cli_helpers.h"
#include "helpers.h"
#include "posenc/tasks/task.h"
#include "posenc/train/trainer.h"
#include "posenc/util/bleu.h"
#include "posenc/util/io.h"
#include "reliability_helpers.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::error_of;

namespace {

/// Words as integer tokens: "a b c" -> {'a', 'b', 'c'}.
std::vector<int64_t> words(const std::string& text) {
  std::vector<int64_t> out;
  for (char c : text)
    if (c != ' ') out.push_back(c);
  return out;
}

double sentence_bleu(const std::string& hypothesis, const std::string& reference) {
  BleuCounts c;
  c.add(words(hypothesis), words(reference));
  return c.score();
}

const std::string kExample = std::string(POSENC_SOURCE_DIR) + "/configs/data/numbers_en_fr.tsv";

std::unique_ptr<Task> translation_task(std::initializer_list<std::string> extra) {
  json j = json::object();
  apply_override(j, "model.kind=encoder_decoder");
  apply_override(j, "task.type=translation");
  apply_override(j, "task.path=" + json(kExample).dump());
  for (const auto& e : extra) apply_override(j, e);
  return make_task(config_from_json(j).task);
}

/// A file of `text` in a scratch directory.
std::string file_with(const std::string& name, const std::string& text) {
  const auto dir = posenc::testing::fresh_dir("translation_files");
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

/// Row r's answer up to (not including) EOS, as text.
std::string answer_text(const Task& task, const TaskBatch& b, int64_t r) {
  const auto answer = b.tokens[r].narrow(0, b.answer_start, b.tokens.size(1) - b.answer_start).contiguous();
  return task.decode_text({answer.data_ptr<int64_t>(), answer.data_ptr<int64_t>() + answer.numel()});
}

}  // namespace

TEST(Bleu, MatchesHandComputedValues) {
  EXPECT_DOUBLE_EQ(sentence_bleu("a b c d e", "a b c d e"), 100.0);
  // p1..p4 = 4/5, 3/4, 2/3, 1/2; equal lengths: BLEU = (4/5 * 3/4 * 2/3 * 1/2)^(1/4) = 0.2^(1/4).
  EXPECT_NEAR(sentence_bleu("a b c d e", "a b c d f"), 100.0 * std::pow(0.2, 0.25), tolerance::kFloat64);
  EXPECT_NEAR(sentence_bleu("a b c d e", "a b c d f"), 66.8740, tolerance::kPrinted4);
  // Every n-gram matches, but 4 tokens against 6: brevity penalty exp(1 - 6/4).
  EXPECT_NEAR(sentence_bleu("a b c d", "a b c d e f"), 100.0 * std::exp(-0.5), tolerance::kFloat64);
  // A longer hypothesis is not penalized for its length, only by its precision:
  // p1..p4 = 4/6, 3/5, 2/4, 1/3.
  EXPECT_NEAR(sentence_bleu("a b c d x y", "a b c d"), 100.0 * std::pow(4.0 / 6 * 3.0 / 5 * 2.0 / 4 * 1.0 / 3, 0.25),
              tolerance::kFloat64);
  // Papineni et al.'s clipping example: "the" seven times against a reference with it twice.
  BleuCounts clipped;
  clipped.add({1, 1, 1, 1, 1, 1, 1}, {1, 2, 3, 4, 1, 5});
  EXPECT_DOUBLE_EQ(clipped.precision(1), 2.0 / 7.0);
  EXPECT_EQ(clipped.score(), 0.0) << "no matching bigram, and no smoothing";
  BleuCounts empty;
  EXPECT_EQ(empty.score(), 0.0);
  empty.add({}, words("a b"));
  EXPECT_EQ(empty.score(), 0.0);
}

TEST(Bleu, ACorpusSumsItsCountsBeforeDividing) {
  // Sentence 1 exact (4/4, 3/3, 2/2, 1/1); sentence 2 "e f g h" against "e f x h"
  // (3/4, 1/3, 0/2, 0/1). Corpus: p = 7/8, 4/6, 2/4, 1/2, lengths 8 and 8.
  BleuCounts corpus;
  corpus.add(words("a b c d"), words("a b c d"));
  corpus.add(words("e f g h"), words("e f x h"));
  EXPECT_NEAR(corpus.score(), 100.0 * std::pow(7.0 / 8 * 4.0 / 6 * 2.0 / 4 * 1.0 / 2, 0.25), tolerance::kFloat64);
  EXPECT_NEAR(corpus.score(), 61.7966, tolerance::kPrinted4);  // not the mean of the sentences' 100 and 0
  BleuCounts a, b;
  a.add(words("a b c d"), words("a b c d"));
  b.add(words("e f g h"), words("e f x h"));
  a += b;
  EXPECT_DOUBLE_EQ(a.score(), corpus.score());
}

TEST(Translation, TheExampleFileSplitsIntoHeldOutAndTrainingPairs) {
  const auto task = translation_task({});
  // Every training target lies within task.min_length..max_length (default 2..20 characters).
  std::set<std::string> trained_targets;
  for (int64_t step = 0; step < 50; ++step) {
    const auto b = task->train_batch(step, 64, 0);
    EXPECT_TRUE(b.padded);
    EXPECT_TRUE(b.tokens.select(1, b.answer_start - 1).eq(task->vocab_size() + 1).all().item<bool>());  // SEP
    for (int64_t r = 0; r < b.tokens.size(0); ++r) {
      const std::string target = answer_text(*task, b, r);
      EXPECT_GE(target.size(), 1u);
      trained_targets.insert(target);
    }
  }
  // An evaluation set of length 24 holds held-out pairs whose targets have 24 characters.
  const auto set = task->fixed_set(24, 1000, 0);
  ASSERT_GT(set.tokens.size(0), 0);
  EXPECT_LE(set.tokens.size(1), task->sequence_length(24)) << "no wider than the longest source makes it";
  EXPECT_EQ(set.tokens.size(1), set.answer_start + 24 + 1) << "sources, SEP, 24 characters and the end token";
  for (int64_t r = 0; r < set.tokens.size(0); ++r) {
    const std::string target = answer_text(*task, set, r);
    EXPECT_EQ(task->encode_text(target).size(), 24u) << target;
    EXPECT_EQ(trained_targets.count(target), 0u) << target << " is held out and longer than training";
  }
  // Held-out pairs within the training lengths are never trained on either.
  int64_t held_out_in_range = 0;
  for (int64_t length = 1; length <= 20; ++length) {
    const auto in_range = task->fixed_set(length, 1000, 0);
    for (int64_t r = 0; r < in_range.tokens.size(0); ++r, ++held_out_in_range)
      EXPECT_EQ(trained_targets.count(answer_text(*task, in_range, r)), 0u);
  }
  EXPECT_GT(held_out_in_range, 50) << "about a fifth of the pairs is held out";
  // No held-out pair has 60 characters: an error that lists the lengths there are.
  EXPECT_NE(error_of([&] { task->check_eval_length(60); }).find("held-out target lengths"), std::string::npos);
  EXPECT_EQ(task->fixed_set(60, 10, 0).tokens.size(0), 0);
}

TEST(Translation, TokensAreCharactersOrWordsAndTheVocabularyIsRecorded) {
  const auto chars = translation_task({});
  EXPECT_EQ(chars->decode_text(chars->encode_text("seven hundred seventy-one")), "seven hundred seventy-one");
  EXPECT_EQ(chars->encode_text("zéro").size(), 4u) << "a code point is one token";
  EXPECT_NE(error_of([&] { chars->encode_text("seven%"); }).find("\"%\" is not in the vocabulary"), std::string::npos);
  const auto word_task = translation_task({"task.tokens=\"word\""});
  EXPECT_EQ(word_task->encode_text("seven hundred seventy-one").size(), 3u);
  EXPECT_EQ(word_task->decode_text(word_task->encode_text("quatre-vingt-dix  neuf")), "quatre-vingt-dix neuf");
  EXPECT_NE(error_of([&] { word_task->encode_text("eleventy"); }).find("\"eleventy\""), std::string::npos);

  // The recorded vocabulary makes a task (a checkpoint's) that needs no file.
  const nlohmann::json identity = word_task->data_identity();
  EXPECT_GT(identity.at("bytes").get<int64_t>(), 0);
  const std::string vocabulary = identity.at("vocabulary");
  const auto recorded = translation_task(
      {"task.tokens=\"word\"", "task.path=\"/nonexistent/file.tsv\"", "task.vocabulary=" + json(vocabulary).dump()});
  EXPECT_EQ(recorded->vocab_size(), word_task->vocab_size());
  EXPECT_EQ(recorded->encode_text("deux cent un"), word_task->encode_text("deux cent un"));
  EXPECT_EQ(recorded->decode_text(word_task->encode_text("deux cent un")), "deux cent un");
  EXPECT_NE(error_of([] { translation_task({"task.vocabulary=\"no newline\""}); }).find("task.vocabulary"),
            std::string::npos);
  // A file with a token the recorded vocabulary lacks (it changed): an error naming the line.
  const std::string changed = file_with("changed.tsv", "one\tun\ntwo\tdeux\neleventy\tonzante\n");
  const std::string message = error_of([&] {
    translation_task(
        {"task.tokens=\"word\"", "task.path=" + json(changed).dump(), "task.vocabulary=" + json(vocabulary).dump()})
        ->train_batch(0, 4, 0);
  });
  EXPECT_NE(message.find("line 3"), std::string::npos) << message;
  EXPECT_NE(message.find("\"eleventy\""), std::string::npos) << message;
}

TEST(Translation, ALineThatIsNotAPairIsAnErrorNamingItsNumber) {
  const auto error_for = [](const std::string& text) {
    const std::string path = file_with("bad.tsv", text);
    return error_of([&] { translation_task({"task.path=" + json(path).dump()})->train_batch(0, 2, 0); });
  };
  std::string e = error_for("one\tun\ntwo deux\nthree\ttrois\n");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("no tab"), std::string::npos) << e;
  e = error_for("one\tun\ntwo\tdeux\tzwei\n");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("more than one tab"), std::string::npos) << e;
  e = error_for("one\tun\n\ntwo\tdeux\n");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("empty line"), std::string::npos) << e;
  e = error_for("one\tun\ntwo\t  \n");
  EXPECT_NE(e.find("line 2: the target is empty"), std::string::npos) << e;
  e = error_for("one\tun\n");
  EXPECT_NE(e.find("1 pair"), std::string::npos) << e;
  e = error_for(
      "one\tun\ntwo\td\xff"
      "eux\n");
  EXPECT_NE(e.find("not UTF-8"), std::string::npos) << e;
  e = error_of([] { translation_task({"task.path=\"/nonexistent/pairs.tsv\""})->train_batch(0, 2, 0); });
  EXPECT_NE(e.find("/nonexistent/pairs.tsv"), std::string::npos) << e;
  // Windows line ends are read as line ends.
  const std::string crlf = file_with("crlf.tsv", "one\tun\r\ntwo\tdeux\r\nthree\ttrois\r\n");
  const auto task = translation_task({"task.path=" + json(crlf).dump(), "task.tokens=\"word\""});
  EXPECT_EQ(task->decode_text(task->encode_text("deux")), "deux");
  // A byte-order mark (what Windows editors write first) is no part of the first word.
  const std::string bom = file_with("bom.tsv", "\xEF\xBB\xBFone\tun\ntwo\tdeux\nthree\ttrois\n");
  const auto with_bom = translation_task({"task.path=" + json(bom).dump(), "task.tokens=\"word\""});
  const std::string vocabulary = with_bom->data_identity().at("vocabulary");
  EXPECT_EQ(vocabulary.find("\xEF\xBB\xBF"), std::string::npos) << vocabulary;
  EXPECT_NE(vocabulary.find("one\n"), std::string::npos) << vocabulary;
}

// A pair written twice is held out or trained on, never both: held-out BLEU
// scored on pairs the model trained on would measure memory, not translation.
TEST(Translation, CopiesOfAPairFallOnOneSideOfTheSplit) {
  std::string text;
  const std::vector<std::string> words = {"one",      "two",      "three",   "four",   "five",   "six",
                                          "seven",    "eight",    "nine",    "ten",    "eleven", "twelve",
                                          "thirteen", "fourteen", "fifteen", "sixteen"};
  for (int copy = 0; copy < 3; ++copy)
    for (size_t i = 0; i < words.size(); ++i) text += words[i] + "\t" + words[i % 7] + " x\n";  // each pair three times
  const std::string path = file_with("copies.tsv", text);
  const auto task = translation_task({"task.path=" + json(path).dump(), "task.tokens=\"word\"", "task.val_fraction=0.3",
                                      "task.min_length=2", "task.max_length=2"});
  const auto rows = [&](const TaskBatch& b) {
    std::set<std::vector<int64_t>> out;
    for (int64_t r = 0; r < b.tokens.size(0); ++r) {
      const auto row = b.tokens[r].contiguous();
      out.insert({row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()});
    }
    return out;
  };
  const auto held = rows(task->fixed_set(2, 1000, 0));
  std::set<std::vector<int64_t>> trained;
  for (int64_t step = 0; step < 50; ++step) {
    const auto batch = rows(task->train_batch(step, 16, 0));
    trained.insert(batch.begin(), batch.end());
  }
  ASSERT_FALSE(held.empty());
  ASSERT_FALSE(trained.empty());
  for (const auto& row : held) EXPECT_EQ(trained.count(row), 0u) << "a held-out pair was trained on";
  // One pair copied is nothing to split.
  const std::string same = file_with("same.tsv", "one\tun\none\tun\none\tun\n");
  const std::string e = error_of([&] { translation_task({"task.path=" + json(same).dump()})->train_batch(0, 2, 0); });
  EXPECT_NE(e.find("only one distinct pair"), std::string::npos) << e;
}

TEST(Translation, TrainingLengthsWithoutPairsAreRefusedUpFront) {
  // The example's longest targets have 31 characters: none of 40.
  const std::string e = error_of([] {
    translation_task({"task.min_length=40", "task.max_length=40"})->check_training_lengths(40, 40);
  });
  EXPECT_NE(e.find("no training pair"), std::string::npos) << e;
  EXPECT_NE(e.find("training target lengths"), std::string::npos) << e;
  // A model kind other than encoder_decoder is named with the task's.
  json j = json::object();
  apply_override(j, "task.type=translation");
  apply_override(j, "model.kind=decoder");
  const std::string kind = error_of([&] { config_from_json(j); });
  EXPECT_NE(kind.find("model.kind=decoder"), std::string::npos) << kind;
  EXPECT_NE(kind.find("encoder_decoder"), std::string::npos) << kind;
}

// A batch is as wide as its own longest source: one long line in the file
// widens the batches that hold it, not every batch.
TEST(Translation, ABatchIsAsWideAsItsOwnLongestSource) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "a" + std::to_string(i) + " b\tc" + std::to_string(i) + " d\n";
  std::string long_source = "a";
  for (int i = 0; i < 250; ++i) long_source += " b";
  text += long_source + "\tc d\n";  // line 41: a source of 251 words
  const std::string path = file_with("long_source.tsv", text);
  const auto task = translation_task({"task.tokens=\"word\"", "task.path=" + json(path).dump(), "task.min_length=2",
                                      "task.max_length=2", "task.val_fraction=0.1"});
  EXPECT_EQ(task->sequence_length(2), 251 + 1 + 2 + 1) << "the longest example the task can make";
  int64_t narrow = 0, wide = 0;
  for (int64_t step = 0; step < 40; ++step) {
    const TaskBatch b = task->train_batch(step, 4, 0);
    EXPECT_TRUE(b.answer_start == 2 + 1 || b.answer_start == 251 + 1) << "step " << step << ": " << b.answer_start;
    (b.answer_start == 3 ? narrow : wide) += 1;
    EXPECT_EQ(b.tokens.size(1), b.answer_start + 2 + 1);
  }
  EXPECT_GT(narrow, 0) << "batches without the long line are as wide as their own sources";
  const std::string error = error_of([&] {
    posenc::testing::Scratch s("translation_wide");
    json j = json::object();
    for (const std::string o :
         {"model.kind=encoder_decoder", "task.type=translation", "task.tokens=\"word\"", "task.min_length=2",
          "task.max_length=2", "task.val_fraction=0.1", "train.batch_size=1048576", "eval.lengths=[2]"})
      apply_override(j, o);
    apply_override(j, "task.path=" + json(path).dump());
    apply_override(j, "train.out_dir=" + json(s.path("run")).dump());
    train(config_from_json(j), TrainRequest{});
  });
  EXPECT_NE(error.find("a training step at task.max_length with the longest source, 251 words at " + path + " line 41"),
            std::string::npos)
      << "the memory error names the line that makes the batches wide, not task.max_length alone: " << error;
  EXPECT_NE(error.find("shorten or leave out that line"), std::string::npos) << error;
}

TEST(Translation, ShortRunLearnsTheExampleAndScoresItsBleu) {
  // 400 steps of a small model on the numbers, characters, trained on targets of
  // up to 20 characters: the held-out pairs within those lengths are mostly
  // translated exactly, and BLEU follows exact match.
  const auto dir = posenc::testing::fresh_dir("translation_learns");
  json j = json::object();
  for (const std::string o :
       {"model.kind=encoder_decoder", "model.d_model=64", "model.heads=4", "model.layers=2", "model.decoder_layers=2",
        "model.d_ff=128", "task.type=translation", "task.max_length=20", "train.steps=400", "train.batch_size=64",
        "train.lr=0.003", "train.warmup_steps=50", "train.log_every=100", "train.eval_every=400",
        "train.val_samples=200", "eval.lengths=[12,16]", "eval.samples_per_length=100"})
    apply_override(j, o);
  apply_override(j, "task.path=" + json(kExample).dump());
  apply_override(j, "train.out_dir=" + json(dir.string()).dump());
  const TrainResult result = train(config_from_json(j), TrainRequest{});
  EXPECT_GT(result.val_accuracy, 0.5) << "held-out exact match within the training lengths (teacher-forced)";
  ASSERT_EQ(result.lengths.size(), 2u);
  for (const auto& r : result.lengths) {
    EXPECT_TRUE(r.has_bleu);
    EXPECT_GT(r.total.accuracy(), 0.4) << "greedy exact match at length " << r.length;
    EXPECT_GT(r.bleu.score(), 60.0) << "at length " << r.length;
    EXPECT_EQ(r.bleu.reference_length, r.length * r.total.n) << "references are the targets, without the end token";
  }
  const json bleu = result.results.at("bleu");
  EXPECT_GT(bleu.at("all").get<double>(), 60.0);
  EXPECT_TRUE(bleu.at("beyond_training").is_null()) << "both lengths are within training";
  std::filesystem::remove_all(dir);
}

TEST(Translation, TrainEvalAndTranslateFromTheCommandLineWithoutTheFile) {
  posenc::testing::Scratch s("translation_cli");
  const std::string pairs = s.path("pairs.tsv"), run = s.path("run");
  std::filesystem::copy_file(kExample, pairs);
  const std::string tiny =
      " --set model.d_model=32 --set model.heads=4 --set model.layers=1 --set model.decoder_layers=1"
      " --set model.d_ff=64 --set train.steps=4 --set train.batch_size=16 --set train.val_samples=40"
      " --set train.log_every=2 --set eval.lengths=[12,24] --set eval.samples_per_length=20 --no-progress";
  auto r = posenc::testing::run_cli("train " + std::string(POSENC_SOURCE_DIR) + "/configs/translation.json --out " +
                                    run + " --set task.path=" + pairs + tiny);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("corpus BLEU over these lengths"), std::string::npos) << r.output;
  const auto results = read_json_file(run + "/results.json");
  EXPECT_EQ(results.at("metric"), "exact_match");
  ASSERT_EQ(results.at("lengths").size(), 2u) << "eval.lengths=[12,24]";
  for (const auto& length : results.at("lengths")) {
    EXPECT_GE(length.at("bleu").get<double>(), 0.0);
    EXPECT_LE(length.at("bleu").get<double>(), 100.0);
  }
  EXPECT_TRUE(results.at("bleu").at("within_training").is_number());
  EXPECT_TRUE(results.at("bleu").at("beyond_training").is_number()) << "24 characters is beyond training's 20";
  const auto task = read_json_file(run + "/config.json").at("task");
  EXPECT_EQ(task.at("vocabulary").get<std::string>().back(), '\n');
  EXPECT_NE(task.at("checksum"), "unrecorded");

  // The checkpoint translates with the file gone: the vocabulary is in its config.
  std::filesystem::rename(pairs, s.path("moved.tsv"));
  r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --input \"seven hundred one\" --max-tokens 8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --input \"seven%\"");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "\"%\" is not in the vocabulary");
  // Evaluating needs the held-out pairs: the missing file is named.
  r = posenc::testing::run_cli("eval " + run + "/checkpoint.pt --out " + s.path("e.json"));
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, pairs);
  // A changed file: a resume refuses it.
  write_file_atomic(pairs, "one\tun\ntwo\tdeux\nthree\ttrois\n");
  r = posenc::testing::run_cli("train " + run + "/config.json --out " + run + " --resume" + tiny);
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "is not the text");
  // A file changed beyond the vocabulary ('%' is new) still lets the checkpoint
  // translate; what reads the pairs names the change.
  write_file_atomic(pairs, "one%\tun\ntwo\tdeux\nthree\ttrois\n");
  r = posenc::testing::run_cli("translate " + run + "/checkpoint.pt --input \"seven hundred one\" --max-tokens 8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  r = posenc::testing::run_cli("eval " + run + "/checkpoint.pt --out " + s.path("e.json"));
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "has changed since the run recorded its vocabulary");
  r = posenc::testing::run_cli("train " + run + "/config.json --out " + run + " --resume" + tiny);
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(r.output, "has changed since the run recorded its vocabulary");
}

TEST(Translation, ARecordedVocabularyGivesTheModelsSizeWithoutReadingTheFile) {
  const auto made = translation_task({});
  const std::string recorded = made->data_identity().at("vocabulary");
  json j = json::object();
  apply_override(j, "model.kind=encoder_decoder");
  apply_override(j, "task.type=translation");
  apply_override(j, "task.path=" + json("/nonexistent/pairs.tsv").dump());
  apply_override(j, "task.vocabulary=" + json(recorded).dump());
  const TaskConfig cfg = config_from_json(j).task;
  EXPECT_EQ(task_vocab_size(cfg), made->vocab_size());
  EXPECT_EQ(make_task(cfg)->vocab_size(), made->vocab_size());
}

}  // namespace POSENC_TEST_UNIT
