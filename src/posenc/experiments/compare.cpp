#include "posenc/experiments/compare.h"
#include "posenc/util/python.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "posenc/experiments/compare_plan.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/experiments/report.h"
#include "posenc/experiments/summary.h"
#include "posenc/train/run_dir.h"
#include "posenc/util/dir_lock.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/text.h"
#include "posenc/util/io.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

/// The last training step a run has logged (0 if none yet).
int64_t logged_step(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  if (last.empty()) return 0;
  try {
    return nlohmann::json::parse(last).value("step", int64_t{0});
  } catch (const nlohmann::json::exception&) {
    return 0;  // a line being written
  }
}

std::string diverged_message(const fs::path& run_dir) {
  try {
    return read_json_file((run_dir / run_files::kDiverged).string()).at("message").get<std::string>();
  } catch (const std::exception&) {
    return "see " + (run_dir / run_files::kDiverged).string();
  }
}

/// The grid's progress: finished runs count whole, running ones by their logged step.
class GridProgress {
 public:
  GridProgress(const ComparePlan& plan, const std::vector<const PlannedRun*>& todo, size_t already_done, bool tty)
      : plan_(plan), total_(already_done + todo.size()), done_(already_done), tty_(tty) {
    for (const auto* r : todo) {
      runs_[r->id] = r;
      start_fraction_[r->id] = fraction(*r);
    }
  }

  void tick(const PoolStatus& s) {
    // Work done in this session, in runs: finished ones plus the running ones' progress.
    double work = 0, left = 0;
    for (const auto& [id, r] : runs_) {
      const double f = finished_.count(id) ? 1.0 : fraction(*r);
      work += f - start_fraction_[id];
      left += 1.0 - f;
    }
    std::string eta = "ETA -";
    if (work > 0.05) eta = "ETA " + format_duration(s.elapsed_s / work * left);
    std::string running;
    for (const auto& id : s.running) {
      const auto* r = runs_.at(id);
      running += fmt::format("{}{} {:.0f}%", running.empty() ? "" : ", ", id, 100 * fraction(*r));
    }
    const std::string line =
        fmt::format("[compare] {}/{} done, {} running, {} left, {} failed | {} elapsed, {} | {}", done_, total_,
                    s.running.size(), s.left, failed_, format_duration(s.elapsed_s), eta, running);
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      std::fflush(stderr);
    } else if (s.elapsed_s - last_log_s_ >= 30) {
      last_log_s_ = s.elapsed_s;
      spdlog::info("{}", line);
    }
  }

  void done(const JobOutcome& o) {
    if (tty_) std::fprintf(stderr, "\r\033[K");
    const PlannedRun& r = *runs_.at(o.id);
    if (interrupt_signal() != 0 && o.exit_code != 0) {
      spdlog::warn("{} stopped after {} (resumes from its last checkpoint on rerun)", o.id, format_duration(o.seconds));
      return;
    }
    finished_.insert(o.id);
    ++done_;
    if (o.exit_code == 0) {
      std::string val;
      const fs::path results = fs::path(plan_.run_dir(r)) / run_files::kResults;
      try {
        val = fmt::format(", val {:.3f}", read_json_file(results.string()).at("val_accuracy").get<double>());
      } catch (const std::exception&) {
      }
      spdlog::info("[{}/{}] {} finished in {}{}", done_, total_, o.id, format_duration(o.seconds), val);
    } else if (o.exit_code == kExitDiverged) {
      ++failed_;
      spdlog::error("[{}/{}] {} DIVERGED after {} (no result; not retried on rerun): {}", done_, total_, o.id,
                    format_duration(o.seconds), diverged_message(fs::path(plan_.run_dir(r))));
    } else {
      ++failed_;
      spdlog::error("[{}/{}] {} FAILED (exit {}) after {}; last lines of {}:\n{}", done_, total_, o.id, o.exit_code,
                    format_duration(o.seconds), plan_.log_path(r), tail_lines(plan_.log_path(r), 6));
    }
  }

 private:
  double fraction(const PlannedRun& r) const {
    const int64_t step = logged_step(fs::path(plan_.run_dir(r)) / run_files::kMetrics);
    return std::min(1.0, static_cast<double>(step) / std::max<int64_t>(1, r.config.train.steps));
  }

  const ComparePlan& plan_;
  std::map<std::string, const PlannedRun*> runs_;
  std::map<std::string, double> start_fraction_;
  std::set<std::string> finished_;
  size_t total_, done_, failed_ = 0;
  bool tty_;
  double last_log_s_ = 0;
};

std::string default_out(const CompareOptions& o) {
  return (fs::path("runs") / (fs::path(o.config).stem().string() + (o.full ? "-full" : ""))).string();
}

}  // namespace

int run_comparison(const CompareOptions& o) {
  const std::string out = o.out.empty() ? default_out(o) : o.out;
  const int jobs = o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  const ComparePlan plan = plan_comparison(o.config, out, o.full, o.threads);
  if (o.figures) check_posenc_python("matplotlib, numpy");  // now, not after hours of training
  // A train run's directory is not a comparison's: taking it over would break its --resume.
  for (const char* file : {run_files::kCheckpoint, run_files::kConfig, run_files::kTrainLock, run_files::kResults})
    if (fs::exists(fs::path(out) / file))
      throw ConfigError("--out " + out + " holds a posenc train run (" + file +
                        "); a comparison needs a directory of its own (choose another --out)");
  const DirectoryLock lock(out, run_files::kCompareLock, "posenc compare");
  int stale = 0;
  for (const char* sub : {"", "configs", "inspect", "attention"})
    stale += remove_stale_temporaries((fs::path(out) / sub).string());
  if (const int n = stale) spdlog::info("removed {} temporary file(s) left in {} by interrupted writes", n, out);
  std::string command = "posenc compare " + o.config + (o.full ? " --full" : "");
  if (!o.out.empty()) command += " --out " + o.out;

  // Decide every run's state before starting any: a clash stops the comparison untouched.
  std::vector<const PlannedRun*> todo;
  std::vector<std::vector<std::string>> argvs;
  size_t finished = 0, resumed = 0, skipped = 0, diverged = 0;
  // The running binary itself, even if a rebuild has replaced the file since it started.
  const std::string self = "/proc/self/exe";
  for (const auto& run : plan.runs) {
    if (!run.skipped.empty()) {
      ++skipped;
      continue;
    }
    const RunState state = run_state(plan, run);
    if (state == RunState::Finished) {
      ++finished;
      continue;
    }
    if (state == RunState::Diverged) {  // deterministic: a rerun would diverge at the same step
      ++diverged;
      continue;
    }
    write_file_atomic(plan.config_path(run), config_to_json(run.config).dump(2) + "\n");
    std::vector<std::string> argv = {self, "train", plan.config_path(run), "--no-progress"};
    if (state == RunState::Resumable) {
      argv.push_back("--resume");
      ++resumed;
    }
    todo.push_back(&run);
    argvs.push_back(argv);
  }
  spdlog::info(
      "compare {} -> {}: {} runs ({} finished already, {} diverged already, {} to resume, {} to start, {} not "
      "buildable), {} at a time, {} thread(s) each",
      o.config, out, plan.runs.size() - skipped, finished, diverged, resumed, todo.size() - resumed, skipped, jobs,
      o.threads);
  std::set<std::string> told;
  for (const auto& run : plan.runs)
    if (!run.skipped.empty() && told.insert(run.variant).second)
      spdlog::info("not run: {}: {}", run.variant, run.skipped);

  std::vector<Job> pool_jobs;
  for (size_t i = 0; i < todo.size(); ++i) pool_jobs.push_back({todo[i]->id, argvs[i], plan.log_path(*todo[i])});
  GridProgress progress(plan, todo, finished, o.progress);
  std::vector<JobOutcome> outcomes;
  {
    // SIGINT/SIGTERM: the pool passes SIGTERM on to the running children, which
    // checkpoint and exit; a second signal ends compare at once (the children
    // still get SIGTERM through die_with_parent()).
    const InterruptGuard stop_cleanly;
    outcomes = run_pool(
        pool_jobs, jobs, [&](const PoolStatus& s) { progress.tick(s); },
        [&](const JobOutcome& out) { progress.done(out); }, 1.0, &interrupt_flag());
    if (const int sig = interrupt_signal()) {
      spdlog::warn("stopped by {}: finished runs are kept, running ones checkpointed; rerun `{}` to continue",
                   signal_name(sig), command);
      return 128 + sig;
    }
  }
  size_t failed = 0;
  for (const auto& oc : outcomes) failed += oc.exit_code != 0;

  const ComparisonSummary summary = summarize(plan);
  const nlohmann::json summary_json = summary_to_json(summary);
  write_file_atomic((fs::path(out) / "summary.json").string(), summary_json.dump(2) + "\n");
  write_file_atomic((fs::path(out) / "summary.csv").string(), summary_to_csv(summary));
  write_file_atomic((fs::path(out) / "summary.md").string(), summary_to_markdown(summary));
  std::printf("\n%s\n", summary_to_text(summary).c_str());
  std::fflush(stdout);  // before the log lines that follow on stderr

  PlotOutcome plots{false, "figures skipped (--no-figures)"};
  if (!summary.variants.empty()) {
    write_figure_inputs(plan, summary, o.inspect_length, o.attention_length);
    if (o.figures) plots = run_plot_script(out);
  } else {
    plots.message = "no finished runs to plot";
  }
  (plots.ran ? spdlog::info("{}", plots.message) : spdlog::warn("{}", plots.message));
  write_report(plan, summary, command, plots);
  spdlog::info("summary: {}/summary.md, report: {}/report.md", out, out);

  if (!summary.diverged.empty())
    spdlog::error(
        "{} run(s) diverged (NaN or inf) and have no results; see summary.md. Training is deterministic, "
        "so a rerun skips them: change the grid (e.g. train.lr) to train them again.",
        summary.diverged.size());
  if (!summary.unfinished.empty()) {
    spdlog::error(
        "{} run(s) have no results ({} failed in this pass); their logs are in {}/logs. Finished runs are "
        "kept: rerun `{}` to retry only those.",
        summary.unfinished.size(), failed, out, command);
    return 1;
  }
  return summary.diverged.empty() ? 0 : 1;
}

}  // namespace posenc
