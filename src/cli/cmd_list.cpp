// posenc list [--json | --markdown]: the config keys, the positional schemes
// and the tasks, with their options, and the keys of comparison grids and
// bench files, from their declarations. `--markdown` is
// docs/configs.md (a test checks that the page in the tree equals it).
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/bench/bench.h"
#include "posenc/experiments/compare_plan.h"
#include "posenc/experiments/slurm.h"
#include "posenc/positional/registry.h"
#include "posenc/positional/scheme.h"
#include "posenc/tasks/registry.h"
#include "posenc/util/text.h"

namespace posenc::cli {

void setup_list(CLI::App& app, ListOptions& o) {
  auto* json = app.add_flag("--json", o.json, "print as JSON");
  app.add_flag("--markdown", o.markdown, "print the config reference page (docs/configs.md)")->excludes(json);
}

namespace {

const char* kind_name(OptionKind k) {
  switch (k) {
    case OptionKind::Int: return "int";
    case OptionKind::Float: return "float";
    case OptionKind::Bool: return "bool";
    case OptionKind::String: return "string";
    case OptionKind::Path: return "path";
    case OptionKind::Weights: return "weights";
    case OptionKind::IntList: return "int list";
    case OptionKind::StringList: return "string list";
    case OptionKind::Scheme: return "scheme";
  }
  return "?";
}

/// "[1, 1024]", "one of a, b", "" (no bounds).
std::string allowed(const OptionSpec& o) {
  if (!o.choices.empty()) return (o.kind == OptionKind::Weights ? "keys " : "one of ") + join(o.choices, ", ");
  if (o.kind == OptionKind::StringList) return "at most " + std::to_string(o.max_items);
  const bool bounded = o.min > -1e300 || o.max < 1e300;
  if (!bounded || o.kind == OptionKind::Bool) return "";
  return "[" + shown_bound(o, o.min) + ", " + shown_bound(o, o.max) + "]" +
         (o.kind == OptionKind::IntList ? ", at most " + std::to_string(o.max_items) + ", none twice" : "");
}

/// One option as JSON: name, type, default (or what stands for it), bounds or choices, doc.
nlohmann::json describe_option(const OptionSpec& o, const std::string& shown_default = "") {
  nlohmann::json j = {{"name", o.name}, {"type", kind_name(o.kind)}, {"default", o.default_value}, {"doc", o.doc}};
  if (!shown_default.empty()) {
    j["default"] = shown_default;
    j["default_is_text"] = true;  // words, not a value a config could hold
  }
  if (!o.choices.empty()) j["choices"] = o.choices;
  if (!o.choice_docs.empty()) j["choice_docs"] = o.choice_docs;
  if (o.set_on_trained) j["set_on_trained"] = true;
  if (o.run_part != RunPart::What) j["run_part"] = o.run_part == RunPart::Where ? "where" : "resumable";
  if (const std::string a = allowed(o); !a.empty()) j["allowed"] = a;
  return j;
}

nlohmann::json describe_options(const std::vector<OptionSpec>& specs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& o : specs) out.push_back(describe_option(o));
  return out;
}

nlohmann::json describe_block(const ConfigBlock& b) {
  nlohmann::json keys = nlohmann::json::array();
  for (const auto& o : b.keys) {
    const auto shown = b.shown_defaults.find(o.name);
    keys.push_back(describe_option(o, shown == b.shown_defaults.end() ? "" : shown->second));
  }
  nlohmann::json block = {{"block", b.path}, {"doc", b.doc}, {"keys", keys}};
  // What holds for every key of the block is said once, for the block.
  const bool all_resumable =
      std::all_of(b.keys.begin(), b.keys.end(), [](const OptionSpec& o) { return o.run_part == RunPart::Resumable; });
  if (all_resumable) {
    block["run_part"] = "resumable";
    for (auto& key : block["keys"]) key.erase("run_part");
  }
  const bool all_set_on_trained =
      std::all_of(b.keys.begin(), b.keys.end(), [](const OptionSpec& o) { return o.set_on_trained; });
  if (all_set_on_trained) {
    block["set_on_trained"] = true;
    for (auto& key : block["keys"]) key.erase("set_on_trained");
  }
  return block;
}

/// A comparison grid's "slurm" block, described as a config block is; a key left out writes no #SBATCH line.
nlohmann::json describe_slurm_block() {
  ConfigBlock block{"slurm", "", slurm_block_keys(), {}};
  for (const OptionSpec& key : block.keys)
    if (key.default_value.is_null()) block.shown_defaults[key.name] = "none";
  return describe_block(block);
}

/// A grid or bench file's top-level keys: name, what it holds, whether it is required, doc.
nlohmann::json describe_file_keys(const std::vector<FileKey>& keys) {
  nlohmann::json out = nlohmann::json::array();
  for (const FileKey& k : keys) {
    nlohmann::json j = {{"name", k.name}, {"holds", file_value_shape(k)}, {"required", k.required}, {"doc", k.doc}};
    if (k.in_full) j["in_full"] = true;
    out.push_back(j);
  }
  return out;
}

/// A file key's doc, with "(also in full)" for a grid key the "full" block may hold.
std::string file_key_doc(const nlohmann::json& key) {
  return key["doc"].get<std::string>() + (key.value("in_full", false) ? " (also in full)" : "");
}

void print_file_keys(const nlohmann::json& keys, const std::string& indent) {
  for (const auto& k : keys)
    std::printf("%s%s (%s%s)\n%s    %s\n", indent.c_str(), k["name"].get<std::string>().c_str(),
                k["required"].get<bool>() ? "required; " : "", k["holds"].get<std::string>().c_str(), indent.c_str(),
                file_key_doc(k).c_str());
}

/// Markdown rows: key, holds, required, meaning.
std::string markdown_file_keys(const nlohmann::json& keys) {
  Table rows = {{"key", "holds", "required", "meaning"}};
  for (const auto& k : keys)
    rows.push_back({"`" + k["name"].get<std::string>() + "`", k["holds"].get<std::string>(),
                    k["required"].get<bool>() ? "yes" : "", file_key_doc(k)});
  return render_markdown(rows, 4);
}

/// What another value of a key (or of a block's keys) means for an existing run and for a trained model, as
/// sentences; "" for nothing.
std::string other_value_sentence(const nlohmann::json& described, const std::string& quote) {
  const std::string part = described.value("run_part", "");
  std::string out;
  if (part == "resumable") out = quote + "posenc train --resume" + quote + " may continue a run with another value";
  if (part == "where")
    out = "Not part of what a run is: " + quote + "posenc train --resume" + quote +
          " may continue a run with another value, and " + quote + "posenc compare" + quote +
          " takes a finished run with another value as its own";
  if (!described.value("set_on_trained", false)) return out;
  const std::string commands = quote + "posenc eval --set" + quote + " and " + quote + "posenc heads --set" + quote;
  std::string read;
  if (described.contains("block"))
    read = commands + " may read a trained model with another value";
  else if (described.value("type", "") == "path")
    read = commands +
           " may read a trained model from a moved copy of the same file (its size and checksum are "
           "checked)";
  else
    read = commands + " may read a trained model with another value, where that adds or removes no parameter";
  return out.empty() ? read : out + "; " + read;
}

/// Builds the scheme once with its defaults to read what it does (hooks, direction).
nlohmann::json describe(const SchemeInfo& info) {
  const SchemeContext ctx{64, 4, 16, 0};
  const auto scheme = info.make(ctx, resolve_scheme_options(info, nlohmann::json::object(), info.name));
  const Capabilities c = scheme->capabilities();
  return {{"name", info.name},
          {"description", info.description},
          {"hooks", c.hook_names()},
          {"placement", info.default_placement == Placement::Input ? "input" : "every_layer"},
          {"directional", scheme->directional()},
          {"reads_task_positions", info.reads_task_positions},
          {"options", describe_options(info.options)}};
}

/// The keys the task block declares for every task (type, min_length, max_length).
std::vector<std::string> task_block_keys() {
  std::vector<std::string> names;
  for (const OptionSpec& o : config_block("task").keys) names.push_back(o.name);
  return names;
}

nlohmann::json describe_task(const TaskInfo& t) {
  std::vector<std::string> keys = task_block_keys(), kinds;
  for (const auto& o : t.options) keys.push_back(o.name);
  for (const ModelKind k : t.model_kinds) kinds.push_back(name_of(k));
  nlohmann::json targets = nlohmann::json::array();
  for (const ProbeTargetSpec& p : t.probe_targets) {
    nlohmann::json target = {{"name", p.name}, {"doc", p.description}};
    if (p.only_where) target["only_where"] = p.only_where->shown();
    targets.push_back(target);
  }
  return {{"name", t.name},
          {"description", t.description},
          {"model_kinds", kinds},
          {"metric", metric_name(t.metric)},
          {"keys", keys},
          {"options", describe_options(t.options)},
          {"length_unit", t.length_unit},
          {"default_lengths", {t.default_min_length, t.default_max_length}},
          {"default_eval_lengths", t.default_eval_lengths},
          {"probe_targets", targets}};
}

/// A probe target's description, with the setting it needs where it needs one.
std::string target_doc(const nlohmann::json& target) {
  std::string doc = target["doc"].get<std::string>();
  if (target.contains("only_where")) doc += " (only where " + target["only_where"].get<std::string>() + ")";
  return doc;
}

/// "position" and the task's own probe targets, for `posenc probe --target`.
std::string probe_target_names(const nlohmann::json& task) {
  std::vector<std::string> names;
  for (const ProbeTargetSpec& t : generic_probe_targets()) names.push_back(t.name);
  for (const auto& p : task["probe_targets"]) names.push_back(p["name"].get<std::string>());
  return join(names, ", ");
}

std::string text_of(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

/// An option's doc followed by what each of its choices does, and whether a trained model may be read with it changed.
std::string doc_with_choices(const nlohmann::json& opt, const std::string& quote) {
  std::string doc = opt["doc"].get<std::string>();
  if (opt.contains("choice_docs"))
    for (size_t i = 0; i < opt["choices"].size(); ++i)
      doc += (i ? "; " : ". ") + quote + opt["choices"][i].get<std::string>() + quote + ": " +
             opt["choice_docs"][i].get<std::string>();
  if (const std::string part = other_value_sentence(opt, quote); !part.empty()) doc += ". " + part;
  return doc;
}

void print_options(const nlohmann::json& options, const std::string& indent) {
  for (const auto& opt : options) {
    const std::string a = opt.contains("allowed") ? "; " + opt["allowed"].get<std::string>() : "";
    std::printf("%s\n", fmt::format("{}{} ({}, default {}{})\n{}    {}", indent, opt["name"].get<std::string>(),
                                    opt["type"].get<std::string>(), text_of(opt["default"]), a, indent,
                                    doc_with_choices(opt, ""))
                            .c_str());
  }
}

/// Markdown rows: key, type, default, allowed, meaning.
std::string markdown_options(const nlohmann::json& options, const std::string& prefix) {
  Table rows = {{"key", "type", "default", "allowed", "meaning"}};
  for (const auto& opt : options)
    rows.push_back({"`" + prefix + opt["name"].get<std::string>() + "`", opt["type"].get<std::string>(),
                    // Words in place of a value go unquoted, as does a string default of a key that is no string.
                    opt.value("default_is_text", false) ||
                            (opt["default"].is_string() && opt["type"] != "string" && opt["type"] != "path")
                        ? opt["default"].get<std::string>()
                        : "`" + opt["default"].dump() + "`",
                    opt.contains("allowed") ? opt["allowed"].get<std::string>() : "", doc_with_choices(opt, "`")});
  return render_markdown(rows, 5);
}

void print_markdown(const nlohmann::json& blocks, const nlohmann::json& schemes, const nlohmann::json& tasks,
                    const nlohmann::json& grid, const nlohmann::json& slurm, const nlohmann::json& bench) {
  std::printf(
      "# Configs\n\n"
      "<!-- Written by `build/posenc list --markdown > docs/configs.md` from the declarations of the config\n"
      "     keys (src/posenc/config.cpp), the schemes, the tasks, and the keys of grid and bench files\n"
      "     (grid_file_keys(), slurm_block_keys(), bench_file_keys()); change those, not this page. -->\n\n"
      "A config is one JSON object of four blocks: `model`, `task`, `train` and `eval`. Every key is checked: an\n"
      "unknown key, a wrong type or an out-of-range value is an error naming the JSON path, e.g.\n\n"
      "```\n$ build/posenc train configs/ordering.json --set model.heads=3\n"
      "error: configs/ordering.json: model.heads: 3 does not divide model.d_model 64\n```\n\n"
      "`--set path=value` overrides any key (repeatable); the value is parsed as JSON and taken as a string\n"
      "otherwise (`--set model.pooling=cls`, `--set eval.lengths=[8,16,512]`). A key left out takes its\n"
      "default. `posenc list` prints the same in the terminal.\n");
  for (const auto& b : blocks) {
    const std::string path = b["block"].get<std::string>();
    const std::string part = other_value_sentence(b, "`");
    std::printf("\n## `%s`\n\n%s.%s\n\n%s", path.c_str(), b["doc"].get<std::string>().c_str(),
                part.empty() ? "" : (" Every key: " + part + ".").c_str(),
                markdown_options(b["keys"], path + ".").c_str());
  }
  std::vector<std::string> shared;
  for (const auto& name : task_block_keys()) shared.push_back("`task." + name + "`");
  std::printf("\n## Task options\n\nEach task takes %s and these.\n", join(shared, ", ").c_str());
  for (const auto& t : tasks) {
    std::printf("\n### `%s`\n\n%s. Trains %s; metric: %s; length: %s (default training %s, evaluation %s).\n",
                t["name"].get<std::string>().c_str(), t["description"].get<std::string>().c_str(),
                join(t["model_kinds"].get<std::vector<std::string>>(), " or ").c_str(),
                t["metric"].get<std::string>().c_str(), t["length_unit"].get<std::string>().c_str(),
                t["default_lengths"].dump().c_str(), t["default_eval_lengths"].dump().c_str());
    if (!t["options"].empty()) std::printf("\n%s", markdown_options(t["options"], "task.").c_str());
    if (!t["probe_targets"].empty()) {
      std::printf("\n`posenc probe --target` reads `%s`, `%s` and:\n\n", kPositionTarget, kRemainingTarget);
      for (const auto& p : t["probe_targets"])
        std::printf("- `%s`: %s\n", p["name"].get<std::string>().c_str(), target_doc(p).c_str());
    }
  }
  std::printf(
      "\n## Scheme options\n\nEach scheme's own options go beside `model.positional.type` (and beside `type` in\n"
      "`model.positional.input` or `.cross`). What each scheme computes: [schemes.md](schemes.md).\n");
  for (const auto& s : schemes) {
    std::printf("\n### `%s`\n\n%s.\n", s["name"].get<std::string>().c_str(),
                s["description"].get<std::string>().c_str());
    if (!s["options"].empty()) std::printf("\n%s", markdown_options(s["options"], "model.positional.").c_str());
  }
  std::printf(
      "\n## A comparison grid file\n\n"
      "Not a config: the file `posenc compare GRID` reads ([commands.md](commands.md#comparison-grids)). Every\n"
      "run starts from `base`, takes `set`, then its task entry's, its scheme entry's and the axes' values.\n"
      "Each axis's values are checked as the config key it sets is; an unknown key or a value of another shape\n"
      "is an error naming it. With `--full`, the keys marked \"also in full\" are read from the `full` block\n"
      "where it has them.\n\n%s",
      markdown_file_keys(grid).c_str());
  std::printf(
      "\n## A comparison grid's `slurm` block\n\n"
      "Not part of a config: the `\"slurm\"` object of a comparison grid, read by `posenc compare GRID --slurm`\n"
      "([cluster.md](cluster.md)). `--partition`, `--time`, `--account`, `--gpus-per-task` and `--ntasks-per-run`\n"
      "win over the key of the same name and are checked the same way; `--sbatch` adds to `sbatch`.\n\n%s",
      markdown_options(slurm["keys"], "slurm.").c_str());
  std::printf(
      "\n## A bench file\n\n"
      "Not a config: the file `posenc bench FILE` reads ([benchmarks.md](benchmarks.md)).\n\n%s\n"
      "Each size's numbers, beside its `name` (required) and `set`:\n\n%s",
      markdown_file_keys(bench["keys"]).c_str(), markdown_options(bench["size_keys"], "").c_str());
}

}  // namespace

int run_list(const ListOptions& o) {
  nlohmann::json schemes = nlohmann::json::array(), tasks = nlohmann::json::array(), blocks = nlohmann::json::array();
  for (const auto& info : scheme_registry()) schemes.push_back(describe(info));
  for (const auto& info : task_registry()) tasks.push_back(describe_task(info));
  for (const auto& b : config_blocks()) blocks.push_back(describe_block(b));
  const nlohmann::json grid = describe_file_keys(grid_file_keys()), slurm = describe_slurm_block();
  nlohmann::json size_keys = nlohmann::json::array();
  for (const OptionSpec& k : bench_size_keys())
    size_keys.push_back(describe_option(k, k.default_value.is_null() ? "none (required)" : ""));
  const nlohmann::json bench = {{"keys", describe_file_keys(bench_file_keys())}, {"size_keys", size_keys}};
  if (o.json) {
    std::printf("%s\n", nlohmann::json{{"schemes", schemes},
                                       {"tasks", tasks},
                                       {"config", blocks},
                                       {"grid_file", grid},
                                       {"grid_slurm", slurm},
                                       {"bench_file", bench}}
                            .dump(2)
                            .c_str());
    return 0;
  }
  if (o.markdown) {
    print_markdown(blocks, schemes, tasks, grid, slurm, bench);
    return 0;
  }
  std::printf("Config keys, a block at a time (--set BLOCK.KEY=VALUE; docs/configs.md has the same):\n");
  for (const auto& b : blocks) {
    const std::string part = other_value_sentence(b, "");
    std::printf("\n%s: %s%s\n", b["block"].get<std::string>().c_str(), b["doc"].get<std::string>().c_str(),
                part.empty() ? "" : (". Every key: " + part).c_str());
    print_options(b["keys"], "  ");
  }
  std::printf("\nPositional schemes (model.positional.type); options go beside type in model.positional:\n\n");
  for (const auto& s : schemes) {
    const std::string hooks = join(s["hooks"].get<std::vector<std::string>>(), ",");
    std::printf("%s\n  %s\n  hooks: %s; placement: %s; directional: %s\n", s["name"].get<std::string>().c_str(),
                s["description"].get<std::string>().c_str(), hooks.empty() ? "-" : hooks.c_str(),
                s["placement"].get<std::string>().c_str(), s["directional"].get<bool>() ? "yes" : "no");
    print_options(s["options"], "    ");
    std::printf("\n");
  }
  std::vector<std::string> input_slot, task_ids, task_id_attention;
  for (const auto& s : schemes) {
    const std::string name = s["name"].get<std::string>();
    const bool input = s["placement"] == "input";
    if (input && name != "none") input_slot.push_back(name);
    if (s["reads_task_positions"].get<bool>() && name != "none") (input ? task_ids : task_id_attention).push_back(name);
  }
  std::printf(
      "Pairs: model.positional.input = one of %s (before block 1), beside a scheme of placement every_layer in "
      "model.positional.type; model.positional.with = a second scheme of placement every_layer, in the same "
      "attention as type (not two that rotate or two that reweight)\n"
      "Task-defined positions (task.positions): read by %s, alone or in the input slot, and by %s in attention, as a "
      "function of the difference of two ids: alone, or beside the input slot with model.positional.task_ids = "
      "both\n",
      join(input_slot, ", ").c_str(), join(task_ids, ", ").c_str(), join(task_id_attention, ", ").c_str());
  std::printf("\nTasks (task.type; model.kind must be one it names):\n\n");
  for (const auto& t : tasks) {
    std::vector<std::string> keys;
    for (const auto& k : t["keys"]) keys.push_back("task." + k.get<std::string>());
    std::printf("%s\n  %s\n  model.kind: %s; metric: %s; length: %s (default training %s, evaluation %s)\n  keys: %s\n",
                t["name"].get<std::string>().c_str(), t["description"].get<std::string>().c_str(),
                join(t["model_kinds"].get<std::vector<std::string>>(), " or ").c_str(),
                t["metric"].get<std::string>().c_str(), t["length_unit"].get<std::string>().c_str(),
                t["default_lengths"].dump().c_str(), t["default_eval_lengths"].dump().c_str(),
                join(keys, ", ").c_str());
    print_options(t["options"], "    ");
    std::printf("  probe targets (posenc probe --target): %s\n", probe_target_names(t).c_str());
    for (const auto& p : t["probe_targets"])
      std::printf("    %s: %s\n", p["name"].get<std::string>().c_str(), target_doc(p).c_str());
    std::printf("\n");
  }
  std::printf("A comparison grid file (posenc compare GRID; with --full, the full block's keys win):\n");
  print_file_keys(grid, "  ");
  std::printf("\nA comparison grid's \"slurm\" block (posenc compare GRID --slurm; the flag of a key's name wins):\n");
  print_options(slurm["keys"], "  ");
  std::printf("\nA bench file (posenc bench FILE):\n");
  print_file_keys(bench["keys"], "  ");
  std::printf("  each size's numbers, beside its name (required) and set:\n");
  print_options(bench["size_keys"], "    ");
  return 0;
}

}  // namespace posenc::cli
