// posenc list [--json]: the positional schemes and their options, from the registry.
#include <cstdio>

#include <fmt/format.h>

#include "commands.h"
#include "posenc/positional/registry.h"
#include "posenc/positional/scheme.h"

namespace posenc::cli {

void setup_list(CLI::App& app, ListOptions& o) { app.add_flag("--json", o.json, "print as JSON"); }

namespace {

const char* kind_name(OptionKind k) {
  switch (k) {
    case OptionKind::Int: return "int";
    case OptionKind::Float: return "float";
    case OptionKind::Bool: return "bool";
    case OptionKind::String: return "string";
  }
  return "?";
}

/// Builds the scheme once with its defaults to read what it does (hooks, direction).
nlohmann::json describe(const SchemeInfo& info) {
  const SchemeContext ctx{64, 4, 16, 0};
  const auto scheme = info.make(ctx, resolve_scheme_options(info, nlohmann::json::object(), info.name));
  const Capabilities c = scheme->capabilities();
  nlohmann::json options = nlohmann::json::array();
  for (const auto& o : info.options) {
    nlohmann::json j = {{"name", o.name}, {"type", kind_name(o.kind)}, {"default", o.default_value}, {"doc", o.doc}};
    if (!o.choices.empty()) j["choices"] = o.choices;
    options.push_back(j);
  }
  return {{"name", info.name},
          {"description", info.description},
          {"hooks", c.hook_names()},
          {"placement", info.default_placement == Placement::Input ? "input" : "every_layer"},
          {"directional", scheme->directional()},
          {"options", options}};
}

}  // namespace

int run_list(const ListOptions& o) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& info : scheme_registry()) all.push_back(describe(info));
  if (o.json) {
    std::printf("%s\n", all.dump(2).c_str());
    return 0;
  }
  std::printf("Positional schemes (model.positional.type); options go beside type in model.positional:\n\n");
  for (const auto& s : all) {
    std::string hooks;
    for (const auto& h : s["hooks"]) hooks += (hooks.empty() ? "" : ",") + h.get<std::string>();
    std::printf("%s\n  %s\n  hooks: %s; placement: %s; directional: %s\n", s["name"].get<std::string>().c_str(),
                s["description"].get<std::string>().c_str(), hooks.empty() ? "-" : hooks.c_str(),
                s["placement"].get<std::string>().c_str(), s["directional"].get<bool>() ? "yes" : "no");
    for (const auto& opt : s["options"]) {
      std::string line = fmt::format("    {:<14} {:<6} default {:<12} {}", opt["name"].get<std::string>(),
                                     opt["type"].get<std::string>(), opt["default"].dump(), opt["doc"].get<std::string>());
      std::printf("%s\n", line.c_str());
    }
    std::printf("\n");
  }
  std::printf("Common: model.positional.apply_to = auto|input|every_layer, model.positional.share_across_layers = true|false\n");
  std::printf("Tasks: ordering (task.vocab_size, task.min_length, task.max_length, task.negatives.{shuffle,adjacent_swap,random_swap,reverse})\n");
  return 0;
}

}  // namespace posenc::cli
