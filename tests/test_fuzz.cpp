// Fuzzing: random configs (encoder, decoder, charlm), random --set paths and
// values, damaged checkpoints of both formats, and random eval and generate
// flags and --out targets. Each case ends validated or with one error line
// that says what was wrong; none crashes, hangs or exits with another status.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/trainer.h"
#include "posenc/util/io.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::expect_one_line_error;
using posenc::testing::fresh_dir;
using posenc::testing::run_cli;
using posenc::testing::Scratch;
using posenc::testing::small_config;
namespace fs = std::filesystem;

namespace {

/// Every JSON pointer of a document's values (objects and arrays included).
void pointers(const json& j, const std::string& at, std::vector<std::string>& out) {
  out.push_back(at);
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) pointers(it.value(), at + "/" + it.key(), out);
  if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i) pointers(j[i], at + "/" + std::to_string(i), out);
}

json extreme_value(std::mt19937& rng) {
  static const std::vector<json> values = {0,
                                           -1,
                                           1,
                                           2,
                                           3,
                                           int64_t{1} << 31,
                                           std::numeric_limits<int64_t>::max(),
                                           std::numeric_limits<int64_t>::min(),
                                           1e308,
                                           -1e308,
                                           1e-320,
                                           0.5,
                                           -0.0,
                                           "",
                                           "x",
                                           "rope",
                                           "\u00e9\u4e2d",
                                           true,
                                           false,
                                           nullptr,
                                           json::array(),
                                           json::object(),
                                           json::array({1, 2}),
                                           json{{"type", "alibi"}},
                                           std::numeric_limits<uint64_t>::max()};
  return values[rng() % values.size()];
}

/// One random change: drop, add, retype, nest or set an extreme number at a random place.
json mutate(json doc, std::mt19937& rng) {
  std::vector<std::string> at;
  pointers(doc, "", at);
  const json::json_pointer p(at[rng() % at.size()]);
  const int op = static_cast<int>(rng() % 5);
  if (op == 0 && !p.empty()) {
    doc[p.parent_pointer()].is_object() ? (void)doc[p.parent_pointer()].erase(p.back())
                                        : doc[p.parent_pointer()].erase(std::stoul(p.back()));
  } else if (op == 1 && doc[p].is_object()) {
    doc[p]["unknown_" + std::to_string(rng() % 3)] = extreme_value(rng);
  } else if (op == 2) {
    doc[p] = extreme_value(rng);
  } else if (op == 3) {
    doc[p] = (rng() % 2) ? json{{"nested", doc[p]}} : json::array({doc[p]});
  } else {
    doc[p] = (rng() % 2) ? json(static_cast<double>(rng()) * std::pow(10.0, static_cast<int>(rng() % 600) - 300))
                         : json(static_cast<int64_t>(rng()) * ((rng() % 2) ? -1 : 1));
  }
  return doc;
}

/// The files of a trained run directory, with their contents: a command that
/// runs or is refused must leave every one of them as it was.
std::map<std::string, std::string> run_files_of(const std::string& run) {
  std::map<std::string, std::string> files;
  for (const char* name : {"checkpoint.pt", "config.json", "results.json", "metrics.jsonl"})
    files[name] = read_file(run + "/" + name);
  return files;
}

}  // namespace

/// One fuzzed command line's outcome: it ran (exit 0, counted in `ok`) or was
/// refused with exit 2 and one error line (counted in `refused`), and its
/// output shows none of `leaks` (a crash, an allocator error).
static void expect_ran_or_refused(const std::string& args, const posenc::testing::CliRun& r,
                                  std::initializer_list<const char*> leaks, int& ok, int& refused) {
  if (r.code == 0) {
    ++ok;
  } else {
    ++refused;
    EXPECT_EQ(r.code, 2) << "posenc " << args << "\n" << r.output.substr(0, 2000);
    // CLI11's own messages (a flag's value) come without "error: "; posenc's are one line.
    if (r.output.find("error: ") != std::string::npos) expect_one_line_error(r.output, "");
  }
  for (const char* leak : leaks)
    EXPECT_EQ(r.output.find(leak), std::string::npos) << "posenc " << args << "\n" << r.output.substr(0, 2000);
}

TEST(Fuzz, MutatedConfigsAreValidatedOrRejectedWithAConfigError) {
  std::mt19937 rng(20261122);
  // The three kinds of run: the default encoder, the decoder of the sequence
  // tasks (copy) and the character-level language model (charlm, on a text file).
  Scratch s("configfuzz");
  write_file_atomic(s.path("text.txt"), std::string(4096, 'a'));
  const std::string configs = std::string(POSENC_SOURCE_DIR) + "/configs/";
  const std::vector<json> bases = {
      config_to_json(Config{}), config_to_json(load_config(configs + "copy.json")),
      config_to_json(load_config(configs + "charlm.json", {"task.path=" + json(s.path("text.txt")).dump()}))};
  ASSERT_EQ(bases[1]["model"]["kind"], "decoder");
  ASSERT_EQ(bases[2]["task"]["type"], "charlm");
  int valid = 0, rejected = 0, cases = 0;
  for (int i = 0; i < 4500; ++i) {
    json doc = bases[i % bases.size()];
    const int changes = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < changes; ++c) doc = mutate(doc, rng);
    std::string text = doc.dump();
    if (i % 5 == 0) {  // raw bytes: invalid UTF-8, control bytes, cut short
      const size_t at = rng() % (text.size() + 1);
      const char junk[] = {'\xff', '\xc3', '\x00', '\x80', '"', '{', '\xed'};
      if (rng() % 3 == 0)
        text = text.substr(0, at);
      else
        text.insert(at, 1, junk[rng() % sizeof junk]);
    }
    ++cases;
    try {
      const Config c = config_from_json(parse_json_strict(text, "fuzz"));
      // What validates round-trips to itself.
      EXPECT_EQ(config_to_json(config_from_json(config_to_json(c))), config_to_json(c)) << text;
      ++valid;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      ++rejected;
    }
  }
  // The same through --set: random paths and values.
  const std::vector<std::string> paths = {"train.steps",
                                          "model",
                                          "model.positional.type",
                                          "eval.lengths",
                                          "task.negatives.shuffle",
                                          "model.positional.base",
                                          "a.b.c",
                                          "train..x",
                                          "train",
                                          "model.kind",
                                          "model.pooling",
                                          "task.path",
                                          "task.bytes",
                                          "task.checksum",
                                          "task.type",
                                          "model.positional.factor",
                                          "model.positional.scaling"};
  for (int i = 0; i < 1500; ++i) {
    json j = bases[i % bases.size()];
    const std::string value = extreme_value(rng).dump();
    ++cases;
    try {
      apply_override(j, paths[rng() % paths.size()] + "=" + value);
      config_from_json(j);
      ++valid;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      ++rejected;
    }
  }
  std::printf("config fuzz: %d cases, %d valid, %d rejected with a ConfigError, 0 other outcomes\n", cases, valid,
              rejected);
  EXPECT_EQ(valid + rejected, cases);
  EXPECT_GT(valid, 300);
  EXPECT_GT(rejected, 1500);
}

TEST(Fuzz, TruncatedAndBitFlippedCheckpointsAreRejectedNamingTheFile) {
  const auto dir = fresh_dir("ckptfuzz");
  const Config cfg = small_config(dir);
  Transformer model(cfg.model, task_vocab_size(cfg.task));
  FusedAdamW optimizer = make_optimizer(model, cfg.train);
  const std::string good = (dir / "good.pt").string(), bad = (dir / "bad.pt").string();
  save_checkpoint(good, model, &optimizer, 3, cfg);
  const std::string bytes = read_file(good);
  std::mt19937 rng(7);
  int cases = 0, rejected = 0;
  const auto expect_rejected = [&](const std::string& damaged, const std::string& what) {
    write_file_atomic(bad, damaged);
    ++cases;
    try {
      Transformer m(cfg.model, task_vocab_size(cfg.task));
      FusedAdamW o = make_optimizer(m, cfg.train);
      load_checkpoint(bad, m, &o);
      ADD_FAILURE() << what << " loaded without an error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      ++rejected;
    }
  };
  for (size_t i = 0; i < 32; ++i) expect_rejected(bytes.substr(0, i), "cut at " + std::to_string(i));
  for (int i = 0; i < 400; ++i) {
    const size_t at = rng() % bytes.size();
    expect_rejected(bytes.substr(0, at), "cut at " + std::to_string(at));
    std::string flipped = bytes;
    flipped[at] ^= static_cast<char>(1 << (rng() % 8));
    expect_rejected(flipped, "bit flipped at " + std::to_string(at));
  }
  for (size_t at = 0; at < 32; ++at) {  // every header byte
    std::string flipped = bytes;
    flipped[at] ^= 0x01;
    expect_rejected(flipped, "header byte " + std::to_string(at));
  }
  std::printf("checkpoint fuzz: %d damaged files (%zu bytes intact), %d rejected naming the file\n", cases,
              bytes.size(), rejected);
  EXPECT_EQ(rejected, cases);
  fs::remove_all(dir);
}

TEST(Fuzz, DamagedCheckpointsWithoutTheHeaderGiveOneLineNamingTheFile) {
  // Checkpoints of the first format (a bare torch archive) carry no checksum:
  // damage reaches LibTorch's reader, whose errors may span lines and quote
  // the damaged bytes. Each must still be one printable line naming the file.
  Scratch s("legacyfuzz");
  const Config cfg = small_config(s.dir);
  Transformer model(cfg.model, task_vocab_size(cfg.task));
  const std::string good = s.path("good.pt");
  save_checkpoint(good, model, nullptr, 3, cfg);
  const std::string archive = read_file(good).substr(32);  // the header is 32 bytes
  ASSERT_EQ(archive.compare(0, 4, "PK\x03\x04"), 0);
  const auto expect_one_printable_line = [&](const std::string& bytes, const std::string& fragment,
                                             const std::string& what) {
    SCOPED_TRACE(what);
    const std::string bad = s.path("bad.pt");
    write_file_atomic(bad, bytes);
    const auto r = run_cli("eval " + bad);
    EXPECT_EQ(r.code, 2) << what << "\n" << r.output;
    expect_one_line_error(r.output, bad + ": " + fragment);
    const std::string line = r.output.substr(r.output.find("error: "));
    for (size_t i = 0; i + 1 < line.size(); ++i)
      EXPECT_TRUE(line[i] >= 0x20 && line[i] < 0x7f) << what << ": byte " << i << " of " << line;
  };
  // The header stripped from an archive that needs one.
  expect_one_printable_line(archive, "checkpoint is damaged: its 32-byte header (size and checksum) is missing",
                            "no header");
  // A class name changed in place (the archive's entries are not checksummed):
  // LibTorch's message runs over three lines.
  const size_t pickle = archive.find("\x80\x02", archive.find("archive/data.pkl"));  // the module's pickle
  ASSERT_NE(pickle, std::string::npos);
  std::string renamed = archive;
  const size_t at = renamed.find("__torch__", pickle);
  ASSERT_NE(at, std::string::npos);
  renamed[at + 7] = 't';
  expect_one_printable_line(renamed, "not a readable posenc checkpoint", "renamed class");
  // A pickle protocol byte that is not ASCII, which LibTorch quotes as it is.
  std::string protocol = archive;
  protocol[pickle + 1] = '\x9b';
  expect_one_printable_line(protocol, "not a readable posenc checkpoint", "protocol byte");
}

TEST(Fuzz, RandomEvalAndGenerateFlagsAndOutTargetsExitZeroOrTwoWithOneLine) {
  Scratch s("clifuzz");
  write_file_atomic(s.path("text.txt"), std::string(3000, 'a') + std::string(3000, 'b'));
  const std::string run = s.path("run"), ckpt = run + "/checkpoint.pt";
  ASSERT_EQ(run_cli("train " + std::string(POSENC_SOURCE_DIR) +
                    "/configs/charlm.json --no-progress --set task.path=" + s.path("text.txt") +
                    " --set task.min_length=8 --set task.max_length=8 --set model.d_model=16 --set model.heads=2"
                    " --set model.layers=1 --set model.d_ff=32 --set train.steps=3 --set train.warmup_steps=1"
                    " --set train.val_samples=4 --set eval.lengths=[8] --set eval.samples_per_length=4 --out " +
                    run)
                .code,
            0);
  const auto before = run_files_of(run);
  write_file_atomic(s.path("mine.txt"), "a user's own file");

  std::mt19937 rng(20261123);
  const auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  const std::vector<std::string> outs = {
      run + "/checkpoint.pt", run + "/config.json", run + "/results.json", run + "/metrics.jsonl", run,
      s.path("missing/x"),    "/proc/version",      s.path("mine.txt"),    s.path("fresh.out"),    "''"};
  const std::vector<std::string> lengths = {"2", "8", "16", "0", "-1", "1e9", "x", "''", "9999999999999999999"};
  const std::vector<std::string> tokens = {"1", "4", "16", "0", "-1", "x", "1e9", "9999999999999999999"};
  const std::vector<std::string> temperatures = {"0", "0.7", "1", "100", "nan", "-1", "1e-45", "1000", "inf"};
  const std::vector<std::string> top_ks = {"1", "5", "0", "-2", "x"};
  const std::vector<std::string> sets = {"eval.seed=3",
                                         "eval.samples_per_length=4",
                                         "model.positional.type=alibi",
                                         "model.d_model=8",
                                         "task.path=/dev/zero",
                                         "task.path=" + s.path("text.txt"),
                                         "model.pooling=mean",
                                         "model.positional.randomize.max_position=64",
                                         "train=5",
                                         "eval.lengths=[8,8]",
                                         "model.positional.scaling=yarn",
                                         "eval=[]",
                                         "task.bytes=1",
                                         "nonsense"};
  const std::vector<std::string> prompts = {
      "ab", "a", "''", "\"$(printf 'a\\377')\"", "\"$(printf 'a\\nb')\"", "\"$(head -c 3000 /dev/zero | tr '\\0' a)\""};
  int ok = 0, refused = 0;
  for (int i = 0; i < 48; ++i) {
    std::string args;
    if (i % 2 == 0) {
      args = "eval " + ckpt + " --samples " + pick({"2", "4", "0", "x", "100000000"});
      if (rng() % 2) args += " --lengths " + pick(lengths) + (rng() % 2 ? "," + pick(lengths) : "");
      if (rng() % 2) args += " --set " + pick(sets);
      if (rng() % 2) args += " --out " + pick(outs);
    } else {
      args = "generate " + ckpt + " --prompt " + pick(prompts) + " --tokens " + pick(tokens);
      if (rng() % 2) args += " --temperature " + pick(temperatures);
      if (rng() % 2) args += " --top-k " + pick(top_ks);
      if (rng() % 2) args += " --out " + pick(outs);
    }
    expect_ran_or_refused(args, run_cli(args), {"terminate called", "Aborted", "Segmentation", "bad_alloc"}, ok,
                          refused);
  }
  std::printf("eval/generate flag fuzz: 48 runs, %d ran, %d refused with status 2\n", ok, refused);
  EXPECT_GT(ok, 3);
  EXPECT_GT(refused, 20);
  // Whatever the flags, the run's own files and a user's file are as they were.
  for (const auto& [name, text] : run_files_of(run)) EXPECT_EQ(text, before.at(name)) << name << " was changed";
  EXPECT_EQ(read_file(s.path("mine.txt")), "a user's own file");
}

// The same for the commands that came later: translate (sources, beams, length
// penalties, output lengths, files that are not text), inspect (schemes, sizes
// up to its caps, scheme options, JSON targets), bench (sizes, schemes,
// threads, attention) and compare --out and bench --out (a user's directory, a
// run's, files, places that cannot be written). Every outcome is
// exit 0 or exit 2 with one line; no crash, no hang, no allocator error; the
// user's and the runs' files are untouched.
TEST(Fuzz, RandomTranslateInspectBenchAndCompareFlagsExitZeroOrTwoWithOneLine) {
  Scratch s("clifuzz2");
  const std::string src = POSENC_SOURCE_DIR, encoder_decoder = s.path("encoder_decoder"),
                    ckpt = encoder_decoder + "/checkpoint.pt";
  ASSERT_EQ(run_cli("train " + src +
                    "/configs/scan.json --set model.d_model=16 --set model.heads=2 --set model.layers=1"
                    " --set model.decoder_layers=1 --set model.d_ff=32 --set train.steps=2 --set train.batch_size=8"
                    " --set train.val_samples=8 --set eval.lengths=[24] --set eval.samples_per_length=4"
                    " --no-progress --out " +
                    encoder_decoder)
                .code,
            0);
  const auto before = run_files_of(encoder_decoder);
  write_file_atomic(s.path("mine.txt"), "a user's own file");
  write_file_atomic(s.path("users/summary.md"), "mine\n");
  write_file_atomic(s.path("sources.txt"), "jump\nwalk twice\n");
  write_file_atomic(s.path("bom.txt"), "\xEF\xBB\xBFjump\n");
  write_file_atomic(s.path("binary.txt"), std::string("jump\0\x01\xff", 7));
  nlohmann::json grid = posenc::testing::tiny_grid();
  grid["schemes"] = {"none"};
  grid["set"]["train.steps"] = 4;
  grid["set"]["train.eval_every"] = 4;
  grid["set"]["eval.lengths"] = {8};
  write_file_atomic(s.path("grid.json"), grid.dump());

  std::mt19937 rng(20261126);
  const auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  const std::vector<std::string> inputs = {"jump",
                                           "walk twice",
                                           "''",
                                           "'jump jump jump jump jump'",
                                           "unknownword",
                                           "\"$(printf 'jump\\001')\"",
                                           "\"$(head -c 3000 /dev/zero | tr '\\0' a)\""};
  const std::vector<std::string> files = {s.path("sources.txt"), s.path("bom.txt"), s.path("binary.txt"),
                                          "/dev/zero",           s.dir.string(),    s.path("missing.txt")};
  const std::vector<std::string> beams = {"1", "4", "0", "257", "x", "-1"};
  const std::vector<std::string> penalties = {"0", "0.6", "10", "11", "-1", "nan", "inf", "x"};
  const std::vector<std::string> max_tokens = {"0", "1", "8", "1048577", "-3", "x"};
  const std::vector<std::string> schemes = {"rope", "alibi", "learned", "sinusoidal", "fire", "t5", "nope", "''"};
  const std::vector<std::string> sizes = {"1", "8", "64", "4096", "65536", "65537", "0", "-1", "x"};
  const std::vector<std::string> scheme_sets = {"base=1000", "layout=interleaved", "max_positions=4", "bogus=1",
                                                "base=nan",  "scaling=yarn",       "factor=8"};
  const std::vector<std::string> outs = {
      s.path("fresh.json"), s.path("mine.txt"),       ckpt, encoder_decoder + "/config.json",
      "/proc/version",      s.path("missing/x.json"), "/",  "''"};
  const std::vector<std::string> compare_outs = {
      s.path("fresh-compare"), s.path("users"), encoder_decoder, s.path("mine.txt"), "/", "/proc/sys"};
  int ok = 0, refused = 0;
  for (int i = 0; i < 36; ++i) {
    std::string args;
    if (i % 9 == 8) {
      args = "compare " + s.path("grid.json") + " --no-progress --no-figures --out " + pick(compare_outs);
    } else if (i % 9 == 4) {
      args = "bench " + src + "/configs/bench.json --no-python --sizes " +
             pick({"small", "huge", "''", "small,small"}) + " --schemes " + pick({"none", "rope", "nope", "''"}) +
             " --threads " + pick({"1", "0", "x"}) + " --attention " + pick({"auto", "explicit", "fused"}) + " --out " +
             pick(compare_outs);
    } else if (i % 2 == 0) {
      args = "translate " + ckpt + (rng() % 3 ? " --input " + pick(inputs) : " --file " + pick(files));
      if (rng() % 2) args += " --beam " + pick(beams);
      if (rng() % 2) args += " --length-penalty " + pick(penalties);
      if (rng() % 2) args += " --max-tokens " + pick(max_tokens);
    } else {
      args = "inspect " + pick(schemes) + " --length " + pick(sizes);
      if (rng() % 2) args += " --heads " + pick(sizes);
      if (rng() % 2) args += " --dim " + pick(sizes);
      if (rng() % 2) args += " --set " + pick(scheme_sets);
      args += " --json " + pick(outs);
    }
    expect_ran_or_refused(args, run_cli(args, "timeout 120"),
                          {"terminate called", "Aborted", "Segmentation", "bad_alloc", "tried to allocate"}, ok,
                          refused);
  }
  std::printf("translate/inspect/bench/compare flag fuzz: 36 runs, %d ran, %d refused with status 2\n", ok, refused);
  EXPECT_GE(ok, 3) << "some of the draws are valid and must run";
  EXPECT_GT(refused, 10);
  for (const auto& [name, text] : run_files_of(encoder_decoder))
    EXPECT_EQ(text, before.at(name)) << name << " was changed";
  EXPECT_EQ(read_file(s.path("mine.txt")), "a user's own file");
  EXPECT_EQ(read_file(s.path("users/summary.md")), "mine\n");
}

}  // namespace POSENC_TEST_UNIT
