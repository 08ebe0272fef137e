#include "posenc/experiments/compare_plan.h"

#include <filesystem>
#include <set>

#include "posenc/model/transformer.h"
#include "posenc/tasks/registry.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/run_dir.h"
#include "posenc/train/trainer.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

/// The keys a comparison file (and its "full" block) may hold.
const std::set<std::string> kTopKeys = {"description", "base",    "set",   "tasks", "schemes",
                                        "qkv",         "pooling", "seeds", "full"};
const std::set<std::string> kFullKeys = {"set", "tasks", "qkv", "pooling", "seeds"};

std::vector<int64_t> seed_list(const json& j, const std::string& where) {
  if (!j.is_array() || j.empty()) throw ConfigError(where + ": expected a non-empty array of integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0)
      throw ConfigError(where + "[" + std::to_string(i) + "]: expected a non-negative integer");
    out.push_back(j[i]);
  }
  return out;
}

/// A grid's task replaces the base's: the base's task.* options that it does
/// not take (addition has no vocab_size) are dropped rather than rejected.
void drop_keys_the_task_does_not_take(json& config) {
  if (!config.contains("task") || !config["task"].is_object() || !config["task"].contains("type") ||
      !config["task"]["type"].is_string())
    return;
  const std::string type = config["task"]["type"].get<std::string>();
  const TaskInfo& info = find_task(type);
  std::vector<std::string> foreign;
  for (const auto& [key, value] : config["task"].items()) {
    if (key == "type" || key == "min_length" || key == "max_length") continue;
    const bool declared =
        std::any_of(info.options.begin(), info.options.end(), [&](const OptionSpec& o) { return o.name == key; });
    if (!declared) foreign.push_back(key);
  }
  for (const auto& key : foreign) config["task"].erase(key);
}

}  // namespace

std::string ComparePlan::run_dir(const PlannedRun& r) const { return (fs::path(out_dir) / "runs" / r.id).string(); }
std::string ComparePlan::log_path(const PlannedRun& r) const {
  return (fs::path(out_dir) / "logs" / (r.id + ".log")).string();
}
std::string ComparePlan::config_path(const PlannedRun& r) const {
  return (fs::path(out_dir) / "configs" / (r.id + ".json")).string();
}

ComparePlan plan_comparison(const std::string& path, const std::string& out_dir, bool full, int64_t threads) {
  const json spec = read_json_file(path);
  check_keys(spec, kTopKeys, path);
  if (!spec.contains("base") || !spec["base"].is_string())
    throw ConfigError(path + ".base: expected the path of a training config, relative to this file");
  const fs::path base_path = fs::path(path).parent_path() / spec["base"].get<std::string>();
  json base = read_json_file(base_path.string());

  ComparePlan plan;
  plan.source = path;
  plan.out_dir = out_dir;
  plan.full = full;
  if (spec.contains("description")) {
    if (!spec["description"].is_string()) throw ConfigError(path + ".description: expected a string");
    plan.description = spec["description"];
  }

  // The grid axes, with --full replacing what its block names.
  json axes = spec;
  if (full) {
    if (!spec.contains("full"))
      throw ConfigError(path + ": --full asks for the \"full\" block, but this file has none");
    check_keys(spec["full"], kFullKeys, path + ".full");
    for (const auto& [key, value] : spec["full"].items()) axes[key] = value;
  }
  if (axes.contains("set"))
    apply_set(base, axes["set"], path + (full && spec["full"].contains("set") ? ".full.set" : ".set"));

  Config base_cfg;
  try {
    base_cfg = config_from_json(base);
  } catch (const ConfigError& e) {
    throw ConfigError(base_path.string() + " (with " + path + ".set): " + e.what());
  }
  const auto qkvs = axes.contains("qkv") ? string_list(axes["qkv"], path + ".qkv") : std::vector{base_cfg.model.qkv};
  const auto poolings =
      axes.contains("pooling") ? string_list(axes["pooling"], path + ".pooling") : std::vector{base_cfg.model.pooling};
  const auto seeds =
      axes.contains("seeds") ? seed_list(axes["seeds"], path + ".seeds") : std::vector{base_cfg.train.seed};

  if (!spec.contains("schemes") || !spec["schemes"].is_array() || spec["schemes"].empty())
    throw ConfigError(path + ".schemes: expected a non-empty array of scheme names or {\"name\", \"set\"} entries");
  // Tasks (optional): a task name sets task.type and the model.kind it trains; {"name", "set"} sets more.
  std::vector<GridEntry> tasks;
  if (axes.contains("tasks")) {
    if (!axes["tasks"].is_array() || axes["tasks"].empty())
      throw ConfigError(path + ".tasks: expected a non-empty array of task names or {\"name\", \"set\"} entries");
    std::set<std::string> task_names_seen;
    for (size_t t = 0; t < axes["tasks"].size(); ++t) {
      const std::string where = path + ".tasks[" + std::to_string(t) + "]";
      const json& raw = axes["tasks"][t];
      GridEntry entry = raw.is_string() ? GridEntry{raw.get<std::string>(), json::object()} : grid_entry(raw, where);
      if (raw.is_string()) {
        try {
          const TaskInfo& info = find_task(entry.name);
          entry.set = {{"task.type", info.name}, {"model.kind", info.model_kind}};
        } catch (const ConfigError& e) {
          throw ConfigError(where + ": " + e.what());
        }
      }
      if (!task_names_seen.insert(entry.name).second)
        throw ConfigError(where + ": the name \"" + entry.name + "\" appears twice");
      tasks.push_back(entry);
    }
  }
  std::set<std::string> ids;
  const std::vector<GridEntry> task_axis =
      tasks.empty() ? std::vector<GridEntry>{GridEntry{"", json::object()}} : tasks;
  for (size_t t = 0; t < task_axis.size(); ++t) {
    const GridEntry& task = task_axis[t];
    std::set<std::string> names;
    for (size_t i = 0; i < spec["schemes"].size(); ++i) {
      const std::string where = path + ".schemes[" + std::to_string(i) + "]";
      const GridEntry entry = grid_entry(spec["schemes"][i], where);
      if (!names.insert(entry.name).second)
        throw ConfigError(where + ": the name \"" + entry.name + "\" appears twice");
      if (t == 0) plan.schemes.push_back(entry.name);
      for (const auto& qkv : qkvs)
        for (const auto& pooling : poolings)
          for (const int64_t seed : seeds) {
            PlannedRun run;
            run.task = task.name;
            run.scheme = entry.name;
            run.qkv = qkv;
            run.pooling = pooling;
            run.seed = seed;
            run.variant = (task.name.empty() ? "" : task.name + "-") + entry.name + "-" + qkv + "-" + pooling;
            run.id = run.variant + "-s" + std::to_string(seed);
            if (!ids.insert(run.id).second)
              throw ConfigError(path + ": the grid names run " + run.id + " twice (repeated qkv, pooling or seed)");
            json j = base;
            if (!task.name.empty()) {
              apply_set(j, task.set, path + ".tasks[" + std::to_string(t) + "]");
              drop_keys_the_task_does_not_take(j);
            }
            apply_set(j, entry.set, where + ".set");
            set_json_path(j, "model.attention.qkv", qkv, path + ".qkv");
            set_json_path(j, "model.pooling", pooling, path + ".pooling");
            set_json_path(j, "train.seed", seed, path + ".seeds");
            set_json_path(j, "train.threads", threads, "--threads");
            set_json_path(j, "train.out_dir", plan.run_dir(run), "--out");
            try {
              run.config = config_from_json(j);
            } catch (const ConfigError& e) {
              throw ConfigError(where + " \"" + entry.name + "\" (run " + run.id + "): " + e.what());
            }
            if (seed != seeds.front()) {
              run.skipped = plan.runs.back().skipped;  // the model does not depend on the seed: built once per variant
            } else {
              try {
                Transformer probe(run.config.model, task_vocab_size(run.config.task));  // decides compatibility
              } catch (const IncompatibleConfig& e) {
                run.skipped = e.what();
              } catch (const ConfigError& e) {
                throw ConfigError(where + " \"" + entry.name + "\" (run " + run.id + "): " + e.what());
              }
            }
            plan.runs.push_back(std::move(run));
          }
    }
  }
  for (const auto& t : tasks) plan.tasks.push_back(t.name);
  return plan;
}

RunState run_state(const ComparePlan& plan, const PlannedRun& run) {
  const fs::path dir = plan.run_dir(run);
  const fs::path results = dir / run_files::kResults, ckpt = dir / run_files::kCheckpoint;
  const auto clash = [&](const fs::path& file, const std::string& at) {
    return ConfigError(file.string() + " was made from a different config (first difference at " + at +
                       "); this comparison leaves it alone: choose another --out, or move that run away");
  };
  // The config a JSON file of the run directory records (results.json and
  // diverged.json under "config", config.json as a whole).
  const auto stored_config = [](const fs::path& file, bool whole) {
    const json stored = read_json_file(file.string());
    if (!whole && !stored.contains("config"))
      throw ConfigError(file.string() + ": no \"config\" entry; not a posenc run");
    try {
      return config_from_json(whole ? stored : stored["config"]);
    } catch (const ConfigError& e) {
      throw ConfigError(file.string() + ": " + e.what());
    }
  };
  // Where the comparison directory lives is not part of a run: it may be moved.
  const std::vector<std::string> same_run = {"/train/threads", "/train/device", "/train/log_every", "/train/out_dir"};
  if (fs::exists(results)) {
    const Config done = stored_config(results, false);
    const std::string at = first_difference(done, run.config, same_run);
    if (at.empty()) return RunState::Finished;
    // Same training, other steps or evaluation: --resume trains on / re-evaluates.
    if (!fs::exists(ckpt) || !first_difference(done, run.config, resumable_changes()).empty()) throw clash(results, at);
  }
  const fs::path diverged = dir / run_files::kDiverged;
  if (fs::exists(diverged)) {
    const std::string at = first_difference(stored_config(diverged, false), run.config, same_run);
    if (at.empty()) return RunState::Diverged;
    if (!fs::exists(ckpt)) throw clash(diverged, at);
  }
  if (fs::exists(ckpt)) {
    const std::string at = first_difference(read_checkpoint_config(ckpt.string()), run.config, resumable_changes());
    if (!at.empty()) throw clash(ckpt, at);
    return RunState::Resumable;
  }
  const fs::path started = dir / run_files::kConfig;  // a run stopped before its first checkpoint
  if (fs::exists(started)) {
    const std::string at = first_difference(stored_config(started, true), run.config, resumable_changes());
    if (!at.empty()) throw clash(started, at);
  }
  return RunState::Fresh;
}

}  // namespace posenc
