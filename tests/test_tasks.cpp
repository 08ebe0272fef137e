// Generic tests over every registered task (a task added to the registry is
// covered here without editing this file), and each task's own meaning.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "helpers.h"
#include "posenc/tasks/task.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

/// A small UTF-8 corpus for charlm, so the tests need no Debian package.
std::string corpus_path() {
  static const std::string path = [] {
    const auto p =
        std::filesystem::temp_directory_path() / ("posenc_test_corpus_" + std::to_string(::getpid()) + ".txt");
    std::ofstream out(p);
    for (int i = 0; i < 400; ++i) out << "Line " << i << ": the quick brown fox jumps over the lazy dog. ";
    return p.string();
  }();
  return path;
}

Config task_config(const std::string& type, std::initializer_list<std::string> extra = {}) {
  json j = json::object();
  apply_override(j, "task.type=" + type);
  apply_override(j, "model.kind=" + name_of(find_task(type).model_kinds.front()));
  // A file a task ships with (translation's example) is named relative to the
  // repository; the tests run elsewhere.
  for (const auto& option : find_task(type).options)
    if (option.kind == OptionKind::Path && std::filesystem::path(option.default_value.get<std::string>()).is_relative())
      apply_override(j,
                     "task." + option.name + "=" +
                         json(std::string(POSENC_SOURCE_DIR) + "/" + option.default_value.get<std::string>()).dump());
  if (type == "charlm") {
    apply_override(j, "task.path=" + json(corpus_path()).dump());
    apply_override(j, "task.min_length=16");
    apply_override(j, "task.max_length=32");
  }
  for (const auto& e : extra) apply_override(j, e);
  return config_from_json(j);
}

std::vector<int64_t> row(const torch::Tensor& t, int64_t r) {
  auto x = t[r].contiguous();
  return {x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + x.numel()};
}

}  // namespace

class EveryTask : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryTask, DescribedAndBuiltFromItsDefaults) {
  const TaskInfo& info = find_task(GetParam());
  EXPECT_FALSE(info.description.empty());
  ASSERT_FALSE(info.model_kinds.empty());
  EXPECT_FALSE(info.default_eval_lengths.empty());
  const Config cfg = task_config(GetParam());
  EXPECT_EQ(cfg.eval.lengths, info.default_eval_lengths);
  const auto task = make_task(cfg.task);
  EXPECT_EQ(task->info().name, GetParam());
  EXPECT_EQ(task->vocab_size(), task_vocab_size(cfg.task));
  // The defaults train and evaluate: every default evaluation length has examples.
  EXPECT_NO_THROW(task->check_training_lengths(cfg.task.min_length, cfg.task.max_length));
  for (int64_t length : info.default_eval_lengths) EXPECT_NO_THROW(task->check_eval_length(length)) << length;
}

TEST_P(EveryTask, BatchesArePureFunctionsOfSeedAndStep) {
  const auto task = make_task(task_config(GetParam()).task);
  const auto a = task->train_batch(7, 16, 3), b = task->train_batch(7, 16, 3), c = task->train_batch(8, 16, 3);
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens));
  EXPECT_EQ(a.answer_start, b.answer_start);
  EXPECT_FALSE(a.tokens.sizes() == c.tokens.sizes() && torch::equal(a.tokens, c.tokens));
  const auto e1 = task->fixed_set(24, 10, 5), e2 = task->fixed_set(24, 10, 5);
  EXPECT_TRUE(torch::equal(e1.tokens, e2.tokens));
}

TEST_P(EveryTask, TokensLengthsAndAnswersAreWellFormed) {
  const Config cfg = task_config(GetParam());
  const auto task = make_task(cfg.task);
  const bool decoder = find_task(GetParam()).model_kinds.front() != ModelKind::Encoder;
  const bool padded = find_task(GetParam()).padded;
  const bool data_width = !task->widest_data().empty();  // translation: its longest source
  for (int64_t step = 0; step < 20; ++step) {
    const auto b = task->train_batch(step, 8, 0);
    ASSERT_EQ(b.tokens.size(0), 8);
    EXPECT_GE(b.tokens.min().item<int64_t>(), padded ? 0 : 1);
    EXPECT_EQ(b.padded, padded);
    EXPECT_LE(b.tokens.max().item<int64_t>(), task->vocab_size() + 1);
    const int64_t T = b.tokens.size(1);
    // T is sequence_length(n) of a training length n, or at most that where the
    // data decides how wide a batch is (a batch is as wide as its own rows).
    bool length_ok = false;
    for (int64_t n = cfg.task.min_length; n <= cfg.task.max_length; ++n)
      length_ok |= data_width ? T <= task->sequence_length(n) : task->sequence_length(n) == T;
    EXPECT_TRUE(length_ok) << T;
    if (decoder) {
      EXPECT_GE(b.answer_start, 1);
      EXPECT_LT(b.answer_start, T);
    } else {
      EXPECT_EQ(b.labels.size(0), 8);
    }
  }
  for (int64_t length : {8, 40}) {
    const int64_t width = task->fixed_set(length, 4, 1).tokens.size(1);
    if (data_width)
      EXPECT_LE(width, task->sequence_length(length));
    else
      EXPECT_EQ(width, task->sequence_length(length));
  }
}

TEST_P(EveryTask, ConfigRoundTripsAndRejectsKeysOfOtherTasks) {
  const Config cfg = task_config(GetParam());
  EXPECT_EQ(first_difference(cfg, config_from_json(config_to_json(cfg)), {}), "");
  const json j = config_to_json(cfg);
  const auto& own = find_task(GetParam()).options;
  // Every option that some other task declares, given to this one.
  for (const auto& other : task_registry())
    for (const auto& option : other.options) {
      if (std::any_of(own.begin(), own.end(), [&](const OptionSpec& o) { return o.name == option.name; })) continue;
      json bad = j;
      bad["task"][option.name] = option.default_value;
      try {
        config_from_json(bad);
        ADD_FAILURE() << "task." << option.name << " accepted by " << GetParam();
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("task." + option.name), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(GetParam()), std::string::npos) << e.what();
      }
    }
}

TEST_P(EveryTask, OptionsAreDocumentedTypeCheckedAndSettable) {
  for (const auto& option : find_task(GetParam()).options) {
    EXPECT_FALSE(option.doc.empty()) << option.name;
    // A value of the wrong type is an error naming the key.
    try {
      task_config(GetParam(), {"task." + option.name + "=[1, 2]"});
      ADD_FAILURE() << "task." << option.name << "=[1, 2] accepted by " << GetParam();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("task." + option.name), std::string::npos) << e.what();
    }
    // Its default, given explicitly with --set, is taken as it is.
    const Config explicit_default =
        task_config(GetParam(), {"task." + option.name + "=" + option.default_value.dump()});
    // (A path is made absolute, relative to the working directory.)
    const json expected =
        option.kind == OptionKind::Path
            ? json(std::filesystem::absolute(option.default_value.get<std::string>()).lexically_normal().string())
            : option.default_value;
    EXPECT_EQ(explicit_default.task.options.json().at(option.name), expected) << option.name;
  }
}

TEST_P(EveryTask, ProbeTargetsAreDescribedAlignedWithTheTokensAndVary) {
  const Config cfg = task_config(GetParam());
  const auto task = make_task(cfg.task);
  const TaskInfo& info = find_task(GetParam());
  const int64_t length = info.default_eval_lengths.front();
  const auto set = task->fixed_set(length, 16, 3);
  std::set<std::string> names;
  for (const ProbeTargetSpec& target : info.probe_targets) {
    EXPECT_NE(target.name, "position");  // every task's, computed by the probe itself
    EXPECT_TRUE(names.insert(target.name).second) << target.name << " declared twice";
    EXPECT_FALSE(target.description.empty()) << target.name;
    if (target.only_where) {
      EXPECT_TRUE(std::any_of(info.options.begin(), info.options.end(),
                              [&](const OptionSpec& o) { return o.name == target.only_where->option; }))
          << target.name << ": only_where names an option the task does not take";
    }
    if (target.only_where && !target.only_where->holds(cfg.task.options)) {
      // Refused before the task computes anything, naming the setting.
      try {
        probe_target_spec(cfg.task, target.name);
        ADD_FAILURE() << target.name << " without " << target.only_where->shown();
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(target.only_where->shown()), std::string::npos) << e.what();
      }
      continue;
    }
    EXPECT_EQ(&probe_target_spec(cfg.task, target.name), &target);
    const torch::Tensor values = task->probe_target(target.name, length, 16, 3);
    ASSERT_EQ(values.sizes(), set.tokens.sizes()) << target.name << ": one value per token of the fixed set";
    EXPECT_EQ(values.scalar_type(), torch::kFloat64);
    EXPECT_TRUE(torch::equal(values.nan_to_num(-1), task->probe_target(target.name, length, 16, 3).nan_to_num(-1)))
        << target.name << ": a pure function of length, n and seed";
    const auto defined = values.index({values.isfinite()});
    ASSERT_GT(defined.numel(), 16) << target.name << ": defined at some tokens of every example";
    EXPECT_GT(defined.max().item<double>(), defined.min().item<double>())
        << target.name << ": a constant probes nothing";
  }
  EXPECT_THROW(task->probe_target("no such target", length, 16, 3), std::logic_error);
  EXPECT_THROW(probe_target_spec(cfg.task, "no such target"), ConfigError);
  EXPECT_EQ(probe_target_spec(cfg.task, kPositionTarget).name, kPositionTarget) << "every task's";
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryTask, ::testing::ValuesIn(task_names()),
                         [](const auto& info) { return info.param; });

TEST(Tasks, SequenceAnswersAreCopiesReversalsSortsAndSums) {
  for (const std::string name : {"copy", "reverse", "sort", "addition"}) {
    const auto task = make_task(task_config(name).task);
    const auto set = task->fixed_set(9, 20, 1);
    const int64_t a = set.answer_start;
    for (int64_t r = 0; r < 20; ++r) {
      const auto tokens = row(set.tokens, r);
      ASSERT_EQ(tokens[a - 1], task->vocab_size() + 1) << name << ": SEP before the answer";
      std::vector<int64_t> x(tokens.begin(), tokens.begin() + a - 1), y(tokens.begin() + a, tokens.end());
      if (name == "copy") {
        EXPECT_EQ(y, x);
      }
      if (name == "reverse") {
        EXPECT_EQ(y, std::vector<int64_t>(x.rbegin(), x.rend()));
      }
      if (name == "sort") {
        std::sort(x.begin(), x.end());
        EXPECT_EQ(y, x);
      }
      if (name == "addition") {  // x = a + b, digits (token - 1) least-significant first
        ASSERT_EQ(x.size(), 19u);
        ASSERT_EQ(x[9], 11);
        ASSERT_EQ(y.size(), 10u);
        int carry = 0;
        for (size_t i = 0; i < 9; ++i) {
          const int s = static_cast<int>(x[i] - 1 + x[10 + i] - 1) + carry;
          EXPECT_EQ(y[i] - 1, s % 10);
          carry = s / 10;
        }
        EXPECT_EQ(y[9] - 1, carry);
      }
    }
  }
}

// Coupled ids (Cho et al. 2024) on copy and reverse: the token that predicts
// an answer token carries the id of the token of x it must copy, so in every
// example the source of each prediction is the one token of x at id distance 0.
TEST(Tasks, CoupledIdsPutTheSourceOfEveryAnswerTokenAtTheSameId) {
  for (const std::string name : {"copy", "reverse"}) {
    const Config c = task_config(name, {"task.positions=\"coupled\"", "task.position_offset=20"});
    const auto task = make_task(c.task);
    const auto counted = make_task(task_config(name).task);
    std::set<int64_t> starts;
    for (int64_t step = 0; step < 30; ++step) {
      const auto b = task->train_batch(step, 4, 0);
      ASSERT_TRUE(b.positions.defined()) << name;
      EXPECT_TRUE(torch::equal(b.tokens, counted->train_batch(step, 4, 0).tokens))
          << name << ": the ids change no token";
      EXPECT_FALSE(counted->train_batch(step, 4, 0).positions.defined()) << name << ": sequence: the model counts";
      const int64_t a = b.answer_start, T = b.tokens.size(1);
      for (int64_t r = 0; r < 4; ++r) {
        const auto tokens = row(b.tokens, r), ids = row(b.positions, r);
        starts.insert(ids[0] - 1);
        EXPECT_LT(*std::max_element(ids.begin(), ids.end()), find_task(name).positions_end(c.task, a - 1)) << name;
        for (int64_t t = a - 1; t + 1 < T; ++t) {  // SEP .. the answer's last but one: each predicts tokens[t + 1]
          int64_t matches = 0;
          for (int64_t i = 0; i < a - 1; ++i)
            if (ids[i] == ids[t]) {
              ++matches;
              EXPECT_EQ(tokens[i], tokens[t + 1]) << name << ": the prediction at " << t << " copies x_" << i;
            }
          EXPECT_EQ(matches, 1) << name << ": one token of x shares the id of position " << t;
        }
      }
    }
    EXPECT_GT(starts.size(), 10u) << name << ": starts are drawn per example from [0, 20]";
    const auto eval = task->fixed_set(9, 3, 1);
    EXPECT_EQ(row(eval.positions, 0)[0], 1) << name << ": evaluation starts at 0";
  }
  EXPECT_NE(
      posenc::testing::config_error({"task.type=\"sort\"", "model.kind=\"decoder\"", "task.positions=\"coupled\""})
          .find("task.positions"),
      std::string::npos)
      << "a sorted token's source depends on the tokens, not on positions";
}

TEST(Tasks, CharLmCoversTheHeldOutTextOnceAndRejectsBadFiles) {
  const Config cfg = task_config("charlm");
  const auto task = make_task(cfg.task);
  std::ifstream in(corpus_path(), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto set = task->fixed_set(50, 1 << 20, 0);  // every window the held-out part holds
  const auto split = static_cast<int64_t>(static_cast<double>(text.size()) * 0.9);
  ASSERT_GT(set.tokens.size(0), 10);
  for (int64_t r = 0; r < set.tokens.size(0); ++r) {  // consecutive windows sharing one character
    const auto tokens = row(set.tokens, r);
    EXPECT_EQ(task->decode_text(tokens), text.substr(split + r * 50, 51));
  }
  EXPECT_EQ(task->decode_text(task->encode_text("héllo")), "héllo");
  EXPECT_THROW(task->check_eval_length(static_cast<int64_t>(text.size())), ConfigError);

  const auto bad = posenc::testing::fresh_dir("bad_corpus");
  std::filesystem::create_directories(bad);
  { std::ofstream(bad / "latin1.txt") << "caf\xe9 au lait, encore et encore, et encore une fois pour la longueur"; }
  for (const auto& [file, says] : std::vector<std::pair<std::string, std::string>>{
           {(bad / "missing.txt").string(), "does not exist"}, {(bad / "latin1.txt").string(), "not UTF-8"}}) {
    const Config c = task_config("charlm", {"task.path=" + json(file).dump()});
    try {
      make_task(c.task)->data_identity();  // the text is read when first needed
      ADD_FAILURE() << file;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("task.path"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(bad);
}

TEST(Tasks, OldConfigsNamingTheTaskStillLoad) {
  json j = json::object();
  apply_override(j, "task.name=ordering");
  EXPECT_EQ(config_from_json(j).task.type, "ordering");
  apply_override(j, "task.type=ordering");
  EXPECT_THROW(config_from_json(j), ConfigError);  // both spellings at once
  json unknown = json::object();
  apply_override(unknown, "task.type=parity");
  try {
    config_from_json(unknown);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("task.type"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("copy"), std::string::npos) << e.what();  // lists the known tasks
  }
}

}  // namespace POSENC_TEST_UNIT
