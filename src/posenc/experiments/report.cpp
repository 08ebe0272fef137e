#include "posenc/experiments/report.h"
#include "posenc/train/run_dir.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "posenc/analysis/trained.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/util/python.h"
#include "posenc/util/text.h"
#include "posenc/util/io.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

/// The run whose figures stand for each grid scheme: its first finished variant and seed.
std::vector<std::pair<std::string, std::string>> figure_runs(const ComparePlan& plan, const ComparisonSummary& s) {
  std::set<std::string> finished;
  for (const auto& v : s.variants)
    for (const auto& id : v.runs) finished.insert(id);
  std::vector<std::pair<std::string, std::string>> out;  // variant, run id
  std::set<std::string> schemes;
  for (const auto& run : plan.runs)
    if (finished.count(run.id) && schemes.insert(run.scheme).second) out.emplace_back(run.variant, run.id);
  return out;
}

/// What a slot's figure inputs and figures add to the variant's name: scheme_<variant><suffix>.png.
std::string slot_suffix(SchemeSlot slot) {
  return slot == SchemeSlot::Input ? ".input" : slot == SchemeSlot::With ? ".with" : "";
}

}  // namespace

void write_figure_inputs(const ComparePlan& plan, const ComparisonSummary& summary, int64_t inspect_length,
                         int64_t attention_length) {
  for (const auto& [variant, id] : figure_runs(plan, summary)) {
    const std::string ckpt = (fs::path(plan.out_dir) / "runs" / id / run_files::kCheckpoint).string();
    const auto run = std::find_if(plan.runs.begin(), plan.runs.end(), [&](const auto& r) { return r.id == id; });
    // The scheme in attention, the one before block 1 where there is one (<variant>.input.json)
    // and the one beside it in attention where there is one (<variant>.with.json).
    for (const SchemeSlot slot : {SchemeSlot::Type, SchemeSlot::Input, SchemeSlot::With}) {
      if (slot != SchemeSlot::Type &&
          (run == plan.runs.end() || slot_scheme(run->config.model.positional, slot) == "none"))
        continue;
      auto inspected = inspect_checkpoint(ckpt, inspect_length, slot);
      inspected["variant"] = variant;
      inspected["run"] = id;
      const std::string name = variant + slot_suffix(slot) + ".json";
      write_file_atomic((fs::path(plan.out_dir) / "inspect" / name).string(), inspected.dump() + "\n");
    }
    AttentionRequest request;
    request.length = attention_length;
    // An encoder_decoder's example: the shortest evaluation length (SCAN has no command of every length).
    if (run != plan.runs.end() && run->config.model.kind == ModelKind::EncoderDecoder &&
        !run->config.eval.lengths.empty())
      request.length = *std::min_element(run->config.eval.lengths.begin(), run->config.eval.lengths.end());
    auto attention = attention_example(ckpt, request);
    attention["variant"] = variant;
    attention["run"] = id;
    write_file_atomic((fs::path(plan.out_dir) / "attention" / (variant + ".json")).string(), attention.dump() + "\n");
  }
}

PlotOutcome run_plot_script(const std::string& out_dir, const std::atomic<bool>* stop) {
  const std::string script = find_script("plot_compare.py");
  if (script.empty())
    return {false, "figures skipped: scripts/plot_compare.py not found (set POSENC_SCRIPTS to the scripts/ folder)"};
  const std::string python = find_python("matplotlib, numpy");
  if (python.empty())
    return {false,
            "figures skipped: no python3 with matplotlib and numpy (install them: sudo apt-get install "
            "python3-matplotlib python3-numpy), then run: python3 " +
                script + " " + out_dir};
  const std::string cmd = shell_quote(python) + " " + shell_quote(script) + " " + shell_quote(out_dir);
  spdlog::info("figures: {}", cmd);
  // Through the shell, which execs python: python may be a name on PATH. A pool of one job with this process's
  // output (no log file): in a process group of its own, the script is stopped by what stops compare (the pool
  // passes it SIGTERM and waits), not by the terminal's Ctrl-C alone.
  const int rc =
      run_pool({{"figures", {"/bin/sh", "-c", "exec " + cmd}, ""}}, 1, nullptr, nullptr, 1.0, stop)[0].exit_code;
  if (stop && stop->load()) return {false, "figures: stopped before the script finished"};
  if (rc != 0) return {false, fmt::format("figures: {} failed (status {}); the table above is complete", cmd, rc)};
  return {true, "figures in " + (fs::path(out_dir) / "figures").string()};
}

namespace {

/// "### Accuracy per example kind at length L (what)" and its table, mean over seeds.
std::string by_kind_table(const ComparisonSummary& s, int64_t length, const std::string& what) {
  if (s.variants.empty()) return "";
  std::vector<std::string> kinds;
  for (const auto& v : s.variants)
    for (const auto& l : v.lengths)
      if (l.length == length)
        for (const auto& [k, _] : l.by_kind)
          if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  if (kinds.empty()) return "";  // a task without example kinds (everything but ordering)
  bool alarms = false;
  for (const auto& v : s.variants)
    for (const auto& l : v.lengths) alarms = alarms || (l.length == length && l.alarms_per_position.n > 0);
  Table table = {{"variant"}};
  table[0].insert(table[0].end(), kinds.begin(), kinds.end());
  if (alarms) table[0].insert(table[0].end(), {"false alarms / position", "sorted with an alarm"});
  for (const auto& v : s.variants)
    for (const auto& l : v.lengths)
      if (l.length == length) {
        table.push_back({v.variant});
        for (const auto& k : kinds) {
          auto it = l.by_kind.find(k);
          table.back().push_back(it == l.by_kind.end() ? std::string("-") : fmt::format("{:.3f}", it->second.mean));
        }
        if (alarms) {
          const bool has = l.alarms_per_position.n > 0;
          table.back().push_back(has ? fmt::format("{:.4f}", l.alarms_per_position.mean) : "-");
          table.back().push_back(has ? fmt::format("{:.3f}", l.alarmed_sequences.mean) : "-");
        }
      }
  return "### Accuracy per example kind at length " + std::to_string(length) + " (" + what + ")\n\n" +
         render_markdown(table, 1) + "\n" +
         (alarms ? "False alarms: on the sorted sequences, the share of positions whose own output the classifier "
                   "calls unsorted, and the share of sorted sequences with at least one such position (means over "
                   "seeds).\n\n"
                 : "");
}

}  // namespace

void write_report(const ComparePlan& plan, const ComparisonSummary& s, const std::string& command,
                  const PlotOutcome& plots) {
  const fs::path figures = fs::path(plan.out_dir) / "figures";
  const auto figure = [&](const std::string& name) { return fs::exists(figures / name); };
  std::ostringstream md;
  md << "# Comparison: " << fs::path(plan.source).filename().string() << (plan.full ? " (full grid)" : "") << "\n\n";
  if (!plan.description.empty()) md << plan.description << "\n\n";
  md << "Reproduce: `" << command << "` (finished runs are kept; rerunning continues).\n\n";
  md << "## Results\n\n" << summary_to_markdown(s) << "\n";

  // Which negatives break first beyond training, and which still hold at the longest length.
  int64_t probe = 0;
  for (int64_t L : s.eval_lengths)
    if (L > s.train_max_length) {
      probe = L;
      break;
    }
  const int64_t longest = s.eval_lengths.empty() ? 0 : *std::max_element(s.eval_lengths.begin(), s.eval_lengths.end());
  if (probe > 0) md << by_kind_table(s, probe, "first length beyond training");
  if (longest > probe) md << by_kind_table(s, longest, "the longest evaluated");

  md << "## Figures\n\n";
  if (!plots.ran) md << "No figures: " << plots.message << "\n\n";
  if (figure("accuracy_vs_length.png"))
    md << "Accuracy against evaluation length (band: ± std over seeds, or the 95% Wilson interval with one seed; "
          "grey: training lengths).\n\n![accuracy vs length](figures/accuracy_vs_length.png)\n\n";
  if (figure("training_curves.png"))
    md << "Training loss and validation accuracy.\n\n![training curves](figures/training_curves.png)\n\n";
  if (figure("operand_grid.png"))
    md << "Exact match of the best run for every pair of operand lengths (eval.operand_grid).\n\n"
          "![operand grid](figures/operand_grid.png)\n\n";
  const auto runs = figure_runs(plan, s);
  if (!runs.empty()) md << "### Each scheme after training, and its attention on one evaluation example\n\n";
  for (const auto& [variant, id] : runs) {
    const std::string scheme_png = "scheme_" + variant + ".png", attention_png = "attention_" + variant + ".png";
    const std::string input_png = "scheme_" + variant + ".input.png", with_png = "scheme_" + variant + ".with.png";
    if (!figure(scheme_png) && !figure(input_png) && !figure(with_png) && !figure(attention_png)) continue;
    md << "#### " << variant << " (run " << id << ")\n\n";
    if (figure(scheme_png)) md << "![" << variant << " scheme](figures/" << scheme_png << ")\n\n";
    if (figure(with_png))
      md << "The scheme beside it in the same attention (model.positional.with), whose terms add to the one "
            "above's:\n\n!["
         << variant << " with scheme](figures/" << with_png << ")\n\n";
    if (figure(input_png))
      md << "Its input scheme (model.positional.input, before block 1):\n\n![" << variant << " input scheme](figures/"
         << input_png << ")\n\n";
    if (figure(attention_png)) md << "![" << variant << " attention](figures/" << attention_png << ")\n\n";
  }
  write_file_atomic((fs::path(plan.out_dir) / "report.md").string(), md.str());
}

}  // namespace posenc
