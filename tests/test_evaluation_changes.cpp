// What `posenc eval --set` and `posenc heads --set` may change on a trained
// model, read from the keys' declarations (OptionSpec::set_on_trained): every
// key declared so must build a model with exactly the trained one's parameters
// and must change what it computes for some value; a key not declared so is
// refused with a message that names what may be changed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "helpers.h"
#include "posenc/model/decoder.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/registry.h"
#include "posenc/train/evaluation_changes.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;

namespace {

/// Values to try for a key: a few of each kind, every choice of a choice key.
std::vector<std::string> candidate_values(const OptionSpec& spec) {
  switch (spec.kind) {
    case OptionKind::Int: return {"2", "3", "33"};
    case OptionKind::Float: return {"0.5", "2.0"};
    case OptionKind::Bool: return {"true", "false"};
    case OptionKind::String: {
      std::vector<std::string> out;
      for (const auto& c : spec.choices) out.push_back("\"" + c + "\"");
      return out;
    }
    default: return {};
  }
}

/// Parameter names and shapes: what a checkpoint holds.
std::map<std::string, std::vector<int64_t>> parameter_shapes(const Config& cfg) {
  Transformer model(cfg.model, task_vocab_size(cfg.task));
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value().sizes().vec();
  return out;
}

/// "" where `read` holds the parameters of `trained` with their shapes, else the first one added, left out or
/// reshaped.
std::string parameter_difference(const std::map<std::string, std::vector<int64_t>>& trained,
                                 const std::map<std::string, std::vector<int64_t>>& read) {
  for (const auto& [name, shape] : read) {
    const auto it = trained.find(name);
    if (it == trained.end()) return "adds " + name;
    if (it->second != shape) return "reshapes " + name;
  }
  for (const auto& entry : trained)
    if (read.count(entry.first) == 0) return "leaves out " + entry.first;
  return "";
}

/// The declaration of `task.name` in the first task that declares it, with that task's name.
std::pair<const TaskInfo*, const OptionSpec*> declared_task_option(const std::string& name) {
  for (const TaskInfo& task : task_registry())
    for (const OptionSpec& o : task.options)
      if (o.name == name) return {&task, &o};
  throw std::runtime_error("no task declares " + name);
}

}  // namespace

TEST(EvaluationChanges, EveryModelKeyDeclaredSetOnTrainedKeepsTheParametersAndChangesWhatTheModelComputes) {
  std::vector<std::string> keys;
  for (const auto& key : keys_set_on_trained())
    if (key.rfind("model.", 0) == 0) keys.push_back(key);
  ASSERT_FALSE(keys.empty());
  // Trained models with a NoPE block and each logit factor that another key qualifies (temperature_beta needs
  // temperature_from; length_scaling_in needs nope_every and a factor, and moves Scalable-Softmax's s_h).
  const std::vector<std::vector<std::string>> trained_with = {
      {"model.positional.nope_every=2"},
      {"model.positional.nope_every=2", "model.attention.logn_from=8"},
      {"model.positional.nope_every=2", "model.attention.temperature_from=4"},
      {"model.positional.nope_every=2", "model.attention.log_length_scale=0.43"},
  };
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const auto tokens = torch::randint(1, 17, {2, 40}, torch::kLong);
  for (const std::string& key : keys) {
    const OptionSpec& spec = config_key(key);
    const auto values = candidate_values(spec);
    ASSERT_FALSE(values.empty()) << key << ": no value of its kind to try";
    int accepted = 0, changed_output = 0;
    for (const std::string kind : {"decoder", "encoder_decoder"})
      for (const auto& extra : trained_with) {
        const Config trained = posenc::testing::small_next_token_config(kind, "rope", extra);
        for (const std::string& value : values) {
          Config read;
          try {
            read = with_evaluation_changes(trained, {key + "=" + value});
          } catch (const ConfigError&) {
            continue;  // a combination the rules between keys refuse (or one that would drop an s_h)
          }
          ++accepted;
          EXPECT_EQ(parameter_difference(parameter_shapes(trained), parameter_shapes(read)), "")
              << kind << " " << key << "=" << value;
          if (kind != std::string("decoder")) continue;
          auto before = posenc::testing::random_positional_model<Decoder>(trained.model, 5);
          auto after = posenc::testing::random_positional_model<Decoder>(read.model, 5);
          if (!torch::equal(before->forward(tokens), after->forward(tokens))) ++changed_output;
        }
      }
    EXPECT_GT(accepted, 0) << key << ": no value was accepted on any trained model";
    EXPECT_GT(changed_output, 0) << key << ": declared set_on_trained, but no value changed the model's output";
  }
}

// The keys declared set_on_trained outside the model (eval.*, a task's evaluation sets, a moved data file) change
// what the model is read on, never the model: its config and its vocabulary stay the trained ones.
TEST(EvaluationChanges, KeysDeclaredSetOnTrainedOutsideTheModelLeaveTheModelAsTrained) {
  const auto scratch = std::filesystem::temp_directory_path() / "posenc_evaluation_changes";
  std::filesystem::create_directories(scratch);
  // A small text both file tasks read (charlm: any UTF-8; translation: source TAB target lines), and a moved copy.
  const auto text = scratch / "pairs.tsv", moved = scratch / "moved" / "pairs.tsv";
  std::filesystem::create_directories(moved.parent_path());
  {
    std::ofstream out(text);
    for (int i = 0; i < 40; ++i) out << "w" << i << " x\tv" << i << " y\n";
  }
  std::filesystem::copy_file(text, moved, std::filesystem::copy_options::overwrite_existing);
  int outside_model = 0;
  for (const std::string& key : keys_set_on_trained()) {
    if (key.rfind("model.", 0) == 0) continue;
    ++outside_model;
    // Trained models the key applies to: for a task's option, the first task that declares it; for eval.*, a
    // classifier, a decoder of two operands and an encoder_decoder with an end token (each eval key is refused
    // for some task).
    std::vector<Config> trained;
    OptionSpec spec;
    if (key.rfind("task.", 0) == 0) {
      const auto [task, option] = declared_task_option(key.substr(5));
      spec = *option;
      std::vector<std::string> with = {"task.type=\"" + task->name + "\"",
                                       "model.kind=\"" + name_of(task->model_kinds.front()) + "\""};
      if (spec.kind == OptionKind::Path) with.push_back("task.path=\"" + text.string() + "\"");
      trained.push_back(posenc::testing::config_with(with));
    } else {
      spec = config_key(key);
      trained.push_back(posenc::testing::config_with({"task.type=\"ordering\""}));
      trained.push_back(posenc::testing::config_with({"task.type=\"addition\"", "model.kind=\"decoder\""}));
      trained.push_back(posenc::testing::config_with({"task.type=\"scan\"", "model.kind=\"encoder_decoder\""}));
    }
    std::vector<std::string> values = candidate_values(spec);
    if (spec.kind == OptionKind::IntList) values = {"[8,16]", "[3]"};
    if (spec.kind == OptionKind::Path) values = {"\"" + moved.string() + "\""};
    ASSERT_FALSE(values.empty()) << key << ": no value of its kind to try";
    int changed = 0;
    for (const Config& before : trained)
      for (const std::string& value : values) {
        Config read;
        try {
          read = with_evaluation_changes(before, {key + "=" + value});
        } catch (const ConfigError&) {
          continue;  // a value the task refuses (an operand grid for ordering, say)
        }
        EXPECT_EQ(config_to_json(read).at("model"), config_to_json(before).at("model")) << key << "=" << value;
        EXPECT_EQ(task_vocab_size(read.task), task_vocab_size(before.task)) << key << "=" << value;
        if (config_to_json(read) != config_to_json(before)) ++changed;
      }
    EXPECT_GT(changed, 0) << key << ": no value was accepted, or none changed the config";
  }
  EXPECT_GE(outside_model, 3) << "the eval block and the tasks' path are declared set_on_trained";
  std::filesystem::remove_all(scratch);
}

TEST(EvaluationChanges, KeysNotDeclaredSetOnTrainedAreRefusedNamingWhatMayChange) {
  const Config trained = posenc::testing::small_next_token_config("decoder", "rope", {});
  const std::string allowed = allowed_evaluation_changes();
  // Every key declared so is named, or its block as BLOCK.* where every key of it is.
  for (const auto& key : keys_set_on_trained())
    EXPECT_TRUE(allowed.find(key) != std::string::npos ||
                allowed.find(key.substr(0, key.rfind('.')) + ".*") != std::string::npos)
        << key;
  // A parameter (QK-norm's gains, Scalable-Softmax's s_h, a head scale), a width, training, the vocabulary and
  // lengths of the copy task the model was trained on, and another task's path, which copy does not declare.
  for (const std::string o :
       {"model.attention.qk_norm=true", "model.attention.log_length_scale=0.43", "model.attention.head_scale=true",
        "model.d_ff=32", "train.steps=5", "task.vocab_size=8", "task.max_length=64", "task.path=\"text.txt\""}) {
    if (o.rfind("task.", 0) != 0) {
      ASSERT_FALSE(config_key(o.substr(0, o.find('='))).set_on_trained) << o;
    }
    try {
      with_evaluation_changes(trained, {o});
      ADD_FAILURE() << o << " was accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("--set " + o + ": ", 0), 0U) << what;
      EXPECT_NE(what.find(allowed), std::string::npos) << what;
    }
  }
}

TEST(EvaluationChanges, TheSchemesOwnOptionsMayChangeButNotWhichSchemeActsOrWhere) {
  const Config trained =
      posenc::testing::small_next_token_config("decoder", "rope", {"model.positional.input=sinusoidal"});
  const Config read =
      with_evaluation_changes(trained, {"model.positional.base=500", "model.positional.input.base=700"});
  EXPECT_EQ(read.model.positional.options.at("base"), 500);
  EXPECT_EQ(read.model.positional.input_options.at("base"), 700);
  // The keys model.positional declares for itself pick the schemes and their placement: none may change.
  for (const std::string o :
       {"model.positional.type=alibi", "model.positional.apply_to=\"qk\"", "model.positional.share_across_layers=false",
        "model.positional.nope_every=2", "model.positional.input=\"learned\"",
        "model.positional.input.type=\"learned\"", "model.positional.input=\"none\""}) {
    try {
      with_evaluation_changes(trained, {o});
      ADD_FAILURE() << o << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--set " + o + ": a trained model may be read with changes to ", 0), 0U)
          << e.what();
    }
  }
}

}  // namespace POSENC_TEST_UNIT
