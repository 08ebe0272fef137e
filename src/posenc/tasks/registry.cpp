// The task table, the generic task helpers and make_task.
#include "posenc/tasks/registry.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "posenc/config.h"
#include "posenc/tasks/task.h"
#include "posenc/tasks/builtin_tasks.h"
#include "posenc/util/io.h"
#include "posenc/util/text.h"

namespace posenc {

const char* metric_name(TaskMetric m) {
  switch (m) {
    case TaskMetric::Accuracy: return "accuracy";
    case TaskMetric::ExactMatch: return "exact_match";
    case TaskMetric::Perplexity: return "perplexity";
  }
  return "?";
}

const char* score_key(TaskMetric m) { return m == TaskMetric::Perplexity ? "token_accuracy" : metric_name(m); }

std::string score_key(const std::string& metric) {
  for (TaskMetric m : {TaskMetric::Accuracy, TaskMetric::ExactMatch, TaskMetric::Perplexity})
    if (metric == metric_name(m)) return score_key(m);
  return score_key(TaskMetric::Accuracy);
}

const std::vector<TaskInfo>& task_registry() {
  // One line per task, in the order `posenc list` prints them.
  static const std::vector<TaskInfo> table = {
      ordering_task_info(), copy_task_info(),     reverse_task_info(),
      sort_task_info(),     addition_task_info(), multiplication_task_info(),
      charlm_task_info(),   scan_task_info(),     translation_task_info(),
  };
  return table;
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& t : task_registry()) names.push_back(t.name);
  return names;
}

const TaskInfo& find_task(const std::string& name) {
  for (const auto& t : task_registry())
    if (t.name == name) return t;
  throw ConfigError("unknown task \"" + name + "\" (known: " + join(task_names(), ", ") + ")");
}

OptionSpec vocab_size_option() {
  return {
      "vocab_size", OptionKind::Int, 64, "data tokens are 1..vocab_size (0 = padding, vocab_size + 1 = CLS or SEP)", 2,
      1 << 24};
}

int64_t task_vocab_size(const TaskConfig& cfg) {
  const TaskInfo& info = find_task(cfg.type);
  if (info.fixed_vocab_size > 0) return info.fixed_vocab_size;
  if (cfg.options.json().contains("vocab_size")) return cfg.options.get_int("vocab_size");
  if (info.recorded_vocab_size)
    if (const int64_t recorded = info.recorded_vocab_size(cfg); recorded > 0) return recorded;
  return make_task(cfg)->vocab_size();  // the vocabulary of the data
}

std::unique_ptr<Task> make_task(const TaskConfig& cfg) { return find_task(cfg.type).make(cfg); }

std::string read_task_file(const std::string& path, std::uintmax_t max_bytes) {
  std::string text;
  try {
    text = read_file(path, max_bytes);
  } catch (const IoError& e) {
    throw ConfigError(std::string("task.path: ") + e.what());
  }
  if (const std::string problem = utf8_problem(text); !problem.empty())
    throw ConfigError("task.path: " + path + " is not UTF-8 text: " + problem);
  return text;
}

std::string TaskSetting::shown() const {
  return "task." + option + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
}

bool TaskSetting::holds(const Options& resolved) const {
  return resolved.json().contains(option) && resolved.json().at(option) == value;
}

const ProbeTargetSpec& probe_target_spec(const TaskConfig& cfg, const std::string& name) {
  const TaskInfo& task = find_task(cfg.type);
  std::vector<std::string> known;
  for (const auto* targets : {&generic_probe_targets(), &task.probe_targets})
    for (const ProbeTargetSpec& t : *targets) {
      known.push_back(t.name);
      if (t.name != name) continue;
      if (t.only_where && !t.only_where->holds(cfg.options)) {
        const TaskSetting now{t.only_where->option, cfg.options.json().value(t.only_where->option, nlohmann::json())};
        throw ConfigError("--target " + name + ": defined only where " + t.only_where->shown() + " (this model's is " +
                          now.shown() + ")" + (t.otherwise.empty() ? "" : "; " + t.otherwise));
      }
      return t;
    }
  throw ConfigError("--target " + name + ": task " + task.name +
                    " has no such probe target (it has: " + join(known, ", ") + ")");
}

torch::Tensor Task::probe_target(const std::string& name, int64_t length, int64_t n, int64_t seed) const {
  const auto& declared = info().probe_targets;
  if (std::none_of(declared.begin(), declared.end(), [&](const ProbeTargetSpec& d) { return d.name == name; }))
    throw std::logic_error("task " + info().name + " has no probe target " + name);
  return declared_probe_target(name, length, n, seed);
}

std::vector<int64_t> Task::encode_text(const std::string& text) const {
  // Token ids written out, as decode_text writes them: "3 17 5".
  std::vector<int64_t> out;
  for (const std::string& word : split_words(text)) {
    char* end = nullptr;
    errno = 0;
    const long long id = std::strtoll(word.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || id < 1 || id > vocab_size())
      throw ConfigError("\"" + word + "\": task.type=" + info().name + " reads token ids from 1 to " +
                        std::to_string(vocab_size()) + ", separated by spaces");
    out.push_back(id);
  }
  if (out.empty()) throw ConfigError("no tokens: task.type=" + info().name + " reads token ids separated by spaces");
  return out;
}
std::string Task::decode_text(const std::vector<int64_t>& tokens) const {
  std::vector<std::string> words;
  for (int64_t t : tokens) words.push_back(std::to_string(t));
  return join(words, " ");
}

}  // namespace posenc
