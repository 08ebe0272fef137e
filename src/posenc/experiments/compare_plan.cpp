#include "posenc/experiments/compare_plan.h"

#include <filesystem>
#include <set>

#include "posenc/experiments/slurm.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/registry.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/fits.h"
#include "posenc/train/run_dir.h"
#include "posenc/train/trainer.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

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
    if (find_option(info.options, key) == nullptr) foreign.push_back(key);
  }
  for (const auto& key : foreign) config["task"].erase(key);
}

}  // namespace

const std::vector<FileKey>& grid_file_keys() {
  static const std::vector<FileKey> keys = {
      {"description", FileValue::Text, "shown at the top of the report"},
      {"base", FileValue::Path, "the training config every run starts from", true},
      {"set", FileValue::Overlay, "values set in every run's config (after the base)", false, "", true},
      {"tasks", FileValue::Entries,
       "the task axis: a task name sets task.type and the task's usual model.kind; an entry's set may set more. The "
       "base's task keys that a task does not take are dropped. Without it, the base's task",
       false, "", true},
      {"schemes", FileValue::Entries,
       "the scheme axis: a name sets model.positional.type; an entry's set may set any key (its name names the runs)",
       true},
      {"qkv", FileValue::Axis, "the attention-variant axis (without it, the base's)", false, "model.attention.qkv",
       true},
      {"pooling", FileValue::Axis,
       "the pooling axis (without it, what the base, task and scheme set); a decoder pools nothing and runs once",
       false, "model.pooling", true},
      {"seeds", FileValue::Axis, "the seed axis (without it, the base's)", false, "train.seed", true},
      {"full", FileValue::Block,
       "what posenc compare --full reads in place of the top-level keys of the same name (those marked also in "
       "full)"},
      {"slurm", FileValue::Block, "the cluster settings of posenc compare --slurm (the section below)"},
  };
  return keys;
}

std::string ComparePlan::run_dir(const PlannedRun& r) const { return (fs::path(out_dir) / "runs" / r.id).string(); }
std::string ComparePlan::log_path(const PlannedRun& r) const {
  return (fs::path(out_dir) / "logs" / (r.id + ".log")).string();
}
std::string ComparePlan::config_path(const PlannedRun& r) const {
  return (fs::path(out_dir) / "configs" / (r.id + ".json")).string();
}

namespace {

/// A comparison file read: its base config (with the grid's "set" applied) and the axes,
/// with --full's block replacing what it names.
struct GridFile {
  std::string path;
  fs::path base_path;
  json spec, axes, base;
  Config base_config;
};

GridFile read_grid_file(const std::string& path, bool full) {
  GridFile g;
  g.path = path;
  g.spec = read_json_file(path);
  // A training config given by mistake: say what it is, not that "model" is an unknown key.
  if (g.spec.is_object() && !g.spec.contains("base") &&
      (g.spec.contains("model") || g.spec.contains("train") || g.spec.contains("task")))
    throw ConfigError(path +
                      " is a training config (it has model/task/train sections), not a comparison grid: run "
                      "it with `posenc train " +
                      path +
                      "`, or give compare a grid, whose \"base\" names such "
                      "a config (configs/*_compare.json)");
  check_file_keys(g.spec, grid_file_keys(), path);
  g.base_path = fs::path(path).parent_path() / g.spec["base"].get<std::string>();
  g.base = read_json_file(g.base_path.string());
  g.axes = g.spec;
  // The "full" block is checked on every pass, so that a slip in it is found before the long run needs it.
  if (g.spec.contains("full")) {
    std::vector<FileKey> in_full;
    for (const FileKey& k : grid_file_keys())
      if (k.in_full) in_full.push_back(k);
    check_file_keys(g.spec["full"], in_full, path + ".full");
  }
  if (full) {
    if (!g.spec.contains("full"))
      throw ConfigError(path + ": --full asks for the \"full\" block, but this file has none");
    for (const auto& [key, value] : g.spec["full"].items()) g.axes[key] = value;
  }
  if (g.axes.contains("set"))
    apply_set(g.base, g.axes["set"], path + (full && g.spec["full"].contains("set") ? ".full.set" : ".set"));
  try {
    g.base_config = config_from_json(g.base);
  } catch (const ConfigError& e) {
    throw ConfigError(g.base_path.string() + " (with " + path + ".set): " + e.what());
  }
  return g;
}

/// The optional task axis: a task name sets task.type and the model.kind it trains; {"name", "set"} sets more.
std::vector<GridEntry> task_entries(const GridFile& g) {
  std::vector<GridEntry> tasks;
  if (!g.axes.contains("tasks")) return tasks;
  const json& list = g.axes["tasks"];
  std::set<std::string> seen;
  for (size_t t = 0; t < list.size(); ++t) {
    const std::string where = g.path + ".tasks[" + std::to_string(t) + "]";
    const json& raw = list[t];
    GridEntry entry = raw.is_string() ? GridEntry{raw.get<std::string>(), json::object()} : grid_entry(raw, where);
    if (raw.is_string()) {
      try {
        const TaskInfo& info = find_task(entry.name);
        entry.set = {{"task.type", info.name}, {"model.kind", info.model_kinds.front()}};
      } catch (const ConfigError& e) {
        throw ConfigError(where + ": " + e.what());
      }
    }
    if (!seen.insert(entry.name).second) throw ConfigError(where + ": the name \"" + entry.name + "\" appears twice");
    tasks.push_back(entry);
  }
  return tasks;
}

/// One cell of the grid: its id and its full config (the base, then the task's, the scheme's and the axes' values).
PlannedRun plan_run(const ComparePlan& plan, const GridFile& g, const GridEntry& task, size_t task_index,
                    const GridEntry& scheme, const std::string& where, const std::string& qkv,
                    const std::string& pooling, int64_t seed, int64_t threads) {
  PlannedRun run;
  run.task = task.name;
  run.scheme = scheme.name;
  run.qkv = qkv;
  run.seed = seed;
  json j = g.base;
  if (!task.name.empty()) {
    apply_set(j, task.set, g.path + ".tasks[" + std::to_string(task_index) + "]");
    drop_keys_the_task_does_not_take(j);
  }
  apply_set(j, scheme.set, where + ".set");
  // A decoder pools nothing: the pooling of the grid (its base and its axis) does
  // not apply to it, and plan_comparison keeps one run of it, not copies.
  const bool decoder =
      j.contains("model") && j["model"].is_object() && j["model"].contains("kind") && j["model"]["kind"] == "decoder";
  if (decoder) j["model"].erase("pooling");
  const bool set_pooling = !decoder && !pooling.empty();  // "": no pooling axis, the pooling the configs set
  const std::string configured = j.contains("model") && j["model"].is_object() && j["model"].contains("pooling") &&
                                         j["model"]["pooling"].is_string()
                                     ? j["model"]["pooling"].get<std::string>()
                                     : name_of(ModelConfig{}.pooling);
  run.pooling = decoder ? name_of(ModelConfig{}.pooling) : set_pooling ? pooling : configured;
  run.variant = (task.name.empty() ? "" : task.name + "-") + scheme.name + "-" + qkv + "-" + run.pooling;
  run.id = run.variant + "-s" + std::to_string(seed);
  set_json_path(j, "model.attention.qkv", qkv, g.path + ".qkv");
  if (set_pooling) set_json_path(j, "model.pooling", pooling, g.path + ".pooling");
  set_json_path(j, "train.seed", seed, g.path + ".seeds");
  set_json_path(j, "train.threads", threads, "--threads");
  set_json_path(j, "train.out_dir", plan.run_dir(run), "--out");
  try {
    run.config = config_from_json(j);
  } catch (const ConfigError& e) {
    throw ConfigError(where + " \"" + scheme.name + "\" (run " + run.id + "): " + e.what());
  }
  return run;
}

/// Why a variant cannot train (an empty string when it can): building the model decides.
/// What train checks before its first step is checked here too, so that a row
/// that cannot run fails now, not when its turn comes after the others trained:
/// the model's memory (on the CPU), its position table against the training
/// and evaluation lengths, and the lengths the task can make (charlm's held-out text).
std::string incompatibility(const PlannedRun& run, const std::string& where) {
  const Config& cfg = run.config;
  try {
    if (cfg.train.device != Device::Cuda) check_model_fits(cfg.model, task_vocab_size(cfg.task), torch::kCPU);
    Transformer probe(cfg.model, task_vocab_size(cfg.task));
    const auto task = make_task(cfg.task);
    const EvaluationSpec spec = evaluation_spec(cfg);
    probe->check_length(task->sequence_length(cfg.task.max_length), spec.training_positions_end > 0);
    task->check_training_lengths(cfg.task.min_length, cfg.task.max_length);
    check_evaluation_lengths(probe, *task, spec, cfg.eval.lengths);
  } catch (const IncompatibleConfig& e) {
    return e.what();
  } catch (const ConfigError& e) {
    throw ConfigError(where + " \"" + run.scheme + "\" (run " + run.id + "): " + e.what());
  }
  return "";
}

}  // namespace

ComparePlan plan_comparison(const std::string& path, const std::string& out_dir, bool full, int64_t threads) {
  const GridFile g = read_grid_file(path, full);
  ComparePlan plan;
  plan.source = path;
  plan.out_dir = out_dir;
  plan.full = full;
  if (g.spec.contains("slurm")) {
    // Checked whether or not this pass submits to Slurm: a slip in the block is found before the cluster needs it.
    read_slurm_settings(g.spec["slurm"], path + ".slurm");
    plan.slurm = g.spec["slurm"];
  }
  plan.description = g.spec.value("description", "");
  const json& axes = g.axes;  // each axis's values were checked as its config key's (check_file_keys)
  std::vector<std::string> qkvs = {name_of(g.base_config.model.qkv)};
  if (axes.contains("qkv")) qkvs = axes["qkv"].get<std::vector<std::string>>();
  // Without a pooling axis each run keeps the pooling its base, task entry and scheme set ("").
  std::vector<std::string> poolings = {""};
  if (axes.contains("pooling")) poolings = axes["pooling"].get<std::vector<std::string>>();
  std::vector<int64_t> seeds = {g.base_config.train.seed};
  if (axes.contains("seeds")) seeds = axes["seeds"].get<std::vector<int64_t>>();
  const std::vector<GridEntry> tasks = task_entries(g);
  const std::vector<GridEntry> task_axis =
      tasks.empty() ? std::vector<GridEntry>{GridEntry{"", json::object()}} : tasks;

  std::set<std::string> ids;
  for (size_t t = 0; t < task_axis.size(); ++t) {
    std::set<std::string> names;
    for (size_t i = 0; i < g.spec["schemes"].size(); ++i) {
      const std::string where = path + ".schemes[" + std::to_string(i) + "]";
      const GridEntry scheme = grid_entry(g.spec["schemes"][i], where);
      if (!names.insert(scheme.name).second)
        throw ConfigError(where + ": the name \"" + scheme.name + "\" appears twice");
      if (t == 0) plan.schemes.push_back(scheme.name);
      for (const auto& qkv : qkvs)
        for (size_t p = 0; p < poolings.size(); ++p)
          for (const int64_t seed : seeds) {
            PlannedRun run = plan_run(plan, g, task_axis[t], t, scheme, where, qkv, poolings[p], seed, threads);
            if (p > 0 && run.config.model.kind == ModelKind::Decoder) continue;  // the one run of a decoder is planned
            if (!ids.insert(run.id).second)
              throw ConfigError(path + ": the grid names run " + run.id + " twice (repeated qkv, pooling or seed)");
            // The model does not depend on the seed: its compatibility is decided once per variant.
            run.skipped = seed != seeds.front() ? plan.runs.back().skipped : incompatibility(run, where);
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
  // Where and how a run went is not part of what it is (the comparison directory may be moved, say).
  // Nor is what training records of its data file (a charlm text's size and checksum): the grid cannot know it.
  std::vector<std::string> same_run = same_run_changes();
  std::vector<std::string> resumable = resumable_changes();
  for (const auto& key : {"/task/bytes", "/task/checksum"}) {
    same_run.push_back(key);
    resumable.push_back(key);
  }
  if (fs::exists(results)) {
    const Config done = stored_config(results, false);
    const std::string at = first_difference(done, run.config, same_run);
    if (at.empty()) return RunState::Finished;
    // Same training, other steps or evaluation: --resume trains on / re-evaluates.
    if (!fs::exists(ckpt) || !first_difference(done, run.config, resumable).empty()) throw clash(results, at);
  }
  const fs::path diverged = dir / run_files::kDiverged;
  if (fs::exists(diverged)) {
    const std::string at = first_difference(stored_config(diverged, false), run.config, same_run);
    if (at.empty()) return RunState::Diverged;
    if (!fs::exists(ckpt)) throw clash(diverged, at);
  }
  if (fs::exists(ckpt)) {
    const std::string at = first_difference(read_checkpoint_config(ckpt.string()), run.config, resumable);
    if (!at.empty()) throw clash(ckpt, at);
    return RunState::Resumable;
  }
  const fs::path started = dir / run_files::kConfig;  // a run stopped before its first checkpoint
  if (fs::exists(started)) {
    const std::string at = first_difference(stored_config(started, true), run.config, resumable);
    if (!at.empty()) throw clash(started, at);
  }
  return RunState::Fresh;
}

}  // namespace posenc
