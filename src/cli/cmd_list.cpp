// posenc list [--json]: the positional schemes and the tasks, with their options, from the registries.
#include <cstdio>

#include <fmt/format.h>

#include "commands.h"
#include "posenc/config.h"
#include "posenc/positional/registry.h"
#include "posenc/positional/scheme.h"
#include "posenc/tasks/registry.h"

namespace posenc::cli {

void setup_list(CLI::App& app, ListOptions& o) { app.add_flag("--json", o.json, "print as JSON"); }

namespace {

const char* kind_name(OptionKind k) {
  switch (k) {
    case OptionKind::Int: return "int";
    case OptionKind::Float: return "float";
    case OptionKind::Bool: return "bool";
    case OptionKind::String: return "string";
    case OptionKind::Path: return "path";
    case OptionKind::Weights: return "weights";
  }
  return "?";
}

nlohmann::json describe_options(const std::vector<OptionSpec>& specs) {
  nlohmann::json options = nlohmann::json::array();
  for (const auto& o : specs) {
    nlohmann::json j = {{"name", o.name}, {"type", kind_name(o.kind)}, {"default", o.default_value}, {"doc", o.doc}};
    if (!o.choices.empty()) j["choices"] = o.choices;
    options.push_back(j);
  }
  return options;
}

void print_options(const nlohmann::json& options) {
  for (const auto& opt : options)
    std::printf("%s\n",
                fmt::format("    {:<14} {:<7} default {:<12} {}", opt["name"].get<std::string>(),
                            opt["type"].get<std::string>(), opt["default"].dump(), opt["doc"].get<std::string>())
                    .c_str());
}

/// Builds the scheme once with its defaults to read what it does (hooks, direction).
nlohmann::json describe(const SchemeInfo& info) {
  const SchemeContext ctx{64, 4, 16, 0};
  const auto scheme = info.make(ctx, resolve_scheme_options(info, nlohmann::json::object(), info.name));
  const Capabilities c = scheme->capabilities();
  const nlohmann::json options = describe_options(info.options);
  return {{"name", info.name},
          {"description", info.description},
          {"hooks", c.hook_names()},
          {"placement", info.default_placement == Placement::Input ? "input" : "every_layer"},
          {"directional", scheme->directional()},
          {"reads_task_positions", info.reads_task_positions},
          {"options", options}};
}

nlohmann::json describe_task(const TaskInfo& t) {
  std::vector<std::string> keys = {"type", "min_length", "max_length"};
  for (const auto& o : t.options) keys.push_back(o.name);
  return {{"name", t.name},
          {"description", t.description},
          {"model_kinds", t.model_kinds},
          {"metric", metric_name(t.metric)},
          {"keys", keys},
          {"options", describe_options(t.options)},
          {"length_unit", t.length_unit},
          {"default_lengths", {t.default_min_length, t.default_max_length}},
          {"default_eval_lengths", t.default_eval_lengths}};
}

}  // namespace

int run_list(const ListOptions& o) {
  nlohmann::json all = nlohmann::json::array(), tasks = nlohmann::json::array(), model = nlohmann::json::array();
  for (const auto& info : scheme_registry()) all.push_back(describe(info));
  for (const auto& info : task_registry()) tasks.push_back(describe_task(info));
  for (const auto& c : model_choices())
    model.push_back({{"key", "model." + c.key}, {"value", c.value}, {"doc", c.doc}});
  if (o.json) {
    std::printf("%s\n", nlohmann::json{{"schemes", all}, {"tasks", tasks}, {"model", model}}.dump(2).c_str());
    return 0;
  }
  std::printf("Positional schemes (model.positional.type); options go beside type in model.positional:\n\n");
  for (const auto& s : all) {
    std::string hooks;
    for (const auto& h : s["hooks"]) hooks += (hooks.empty() ? "" : ",") + h.get<std::string>();
    std::printf("%s\n  %s\n  hooks: %s; placement: %s; directional: %s\n", s["name"].get<std::string>().c_str(),
                s["description"].get<std::string>().c_str(), hooks.empty() ? "-" : hooks.c_str(),
                s["placement"].get<std::string>().c_str(), s["directional"].get<bool>() ? "yes" : "no");
    print_options(s["options"]);
    std::printf("\n");
  }
  std::printf(
      "Common: model.positional.apply_to = auto|input|every_layer, model.positional.share_across_layers = "
      "true|false\n");
  std::string input_slot, task_ids, task_id_attention;
  const auto append = [](std::string& list, const std::string& name) { list += (list.empty() ? "" : ", ") + name; };
  for (const auto& s : all) {
    const std::string name = s["name"].get<std::string>();
    const bool input = s["placement"] == "input";
    if (input && name != "none") append(input_slot, name);
    if (s["reads_task_positions"].get<bool>() && name != "none") append(input ? task_ids : task_id_attention, name);
  }
  std::printf(
      "Pairs: model.positional.input = one of %s (before block 1), beside a scheme of placement every_layer in "
      "model.positional.type\nTask-defined positions (task.positions): read by %s, alone or in the input slot, "
      "and by %s in attention, as a function of the difference of two ids: alone, or beside the input slot "
      "with model.positional.task_ids = both\n",
      input_slot.c_str(), task_ids.c_str(), task_id_attention.c_str());
  std::printf("\nTasks (task.type; model.kind must be one it names):\n\n");
  for (const auto& t : tasks) {
    std::string keys, kinds;
    for (const auto& k : t["model_kinds"]) kinds += (kinds.empty() ? "" : " or ") + k.get<std::string>();
    for (const auto& k : t["keys"]) keys += (keys.empty() ? "" : ", ") + std::string("task.") + k.get<std::string>();
    std::printf("%s\n  %s\n  model.kind: %s; metric: %s; length: %s (default training %s, evaluation %s)\n  keys: %s\n",
                t["name"].get<std::string>().c_str(), t["description"].get<std::string>().c_str(), kinds.c_str(),
                t["metric"].get<std::string>().c_str(), t["length_unit"].get<std::string>().c_str(),
                t["default_lengths"].dump().c_str(), t["default_eval_lengths"].dump().c_str(), keys.c_str());
    print_options(t["options"]);
    std::printf("\n");
  }
  std::printf("Model choices (the encoder's pooling and token embedding):\n\n");
  for (const auto& c : model)
    std::printf("%s\n", fmt::format("  {:<22} {:<8} {}", c["key"].get<std::string>(), c["value"].get<std::string>(),
                                    c["doc"].get<std::string>())
                            .c_str());
  return 0;
}

}  // namespace posenc::cli
