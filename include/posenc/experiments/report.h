// What a comparison leaves for people to read: the JSON behind the figures,
// the figures (scripts/plot_compare.py) and report.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "posenc/experiments/compare_plan.h"
#include "posenc/experiments/summary.h"

namespace posenc {

/// For each grid scheme, its first finished run (plan order): the trained
/// scheme (OUT/inspect/<variant>.json) and its attention on one sorted example
/// (OUT/attention/<variant>.json).
void write_figure_inputs(const ComparePlan& plan, const ComparisonSummary& summary, int64_t inspect_length,
                         int64_t attention_length);

struct PlotOutcome {
  bool ran = false;
  std::string message;  ///< what happened, or how to get the figures
};
/// Runs scripts/plot_compare.py OUT with a python3 that has matplotlib
/// ($POSENC_PYTHON, /usr/bin/python3, python3); a clear hint when there is none.
/// When *stop becomes true the script gets SIGTERM and is waited for.
PlotOutcome run_plot_script(const std::string& out_dir, const std::atomic<bool>* stop);

/// OUT/report.md: protocol, the summary table, accuracy per negative kind and
/// every figure found in OUT/figures.
void write_report(const ComparePlan& plan, const ComparisonSummary& summary, const std::string& command,
                  const PlotOutcome& plots);

}  // namespace posenc
