#include "posenc/experiments/compare.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
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
#include "posenc/util/text.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

/// Set by SIGINT / SIGTERM: the pool stops its children and the comparison ends resumable.
std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

/// Holds an exclusive lock on OUT/compare.lock for the life of the comparison:
/// two comparisons on one directory would train the same runs twice.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir) {
    fs::create_directories(dir);
    const std::string path = (fs::path(dir) / "compare.lock").string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd_ < 0) throw ConfigError(path + ": cannot open the lock file");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {0};
      const auto n = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      throw ConfigError("another posenc compare is running on " + dir + (n > 0 ? " (pid " + std::string(buf) + ")" : "") +
                        "; wait for it or stop it first");
    }
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
      // the pid is only informative
    }
  }
  ~DirectoryLock() { ::close(fd_); }  // closing releases the lock

 private:
  int fd_ = -1;
};

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
    if (g_interrupted.load() && o.exit_code != 0) {
      spdlog::warn("{} stopped after {} (resumes from its last checkpoint on rerun)", o.id, format_duration(o.seconds));
      return;
    }
    finished_.insert(o.id);
    ++done_;
    if (o.exit_code == 0) {
      std::string val;
      const fs::path results = fs::path(plan_.run_dir(r)) / "results.json";
      try {
        val = fmt::format(", val {:.3f}", read_json_file(results.string()).at("val_accuracy").get<double>());
      } catch (const std::exception&) {
      }
      spdlog::info("[{}/{}] {} finished in {}{}", done_, total_, o.id, format_duration(o.seconds), val);
    } else {
      ++failed_;
      spdlog::error("[{}/{}] {} FAILED (exit {}) after {}; last lines of {}:\n{}", done_, total_, o.id, o.exit_code,
                    format_duration(o.seconds), plan_.log_path(r), tail_lines(plan_.log_path(r), 6));
    }
  }

 private:
  double fraction(const PlannedRun& r) const {
    const int64_t step = logged_step(fs::path(plan_.run_dir(r)) / "metrics.jsonl");
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
  const DirectoryLock lock(out);
  std::string command = "posenc compare " + o.config + (o.full ? " --full" : "");
  if (!o.out.empty()) command += " --out " + o.out;

  // Decide every run's state before starting any: a clash stops the comparison untouched.
  std::vector<const PlannedRun*> todo;
  std::vector<std::vector<std::string>> argvs;
  size_t finished = 0, resumed = 0, skipped = 0;
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
    write_file_atomic(plan.config_path(run), config_to_json(run.config).dump(2) + "\n");
    std::vector<std::string> argv = {self, "train", plan.config_path(run), "--no-progress"};
    if (state == RunState::Resumable) {
      argv.push_back("--resume");
      ++resumed;
    }
    todo.push_back(&run);
    argvs.push_back(argv);
  }
  spdlog::info("compare {} -> {}: {} runs ({} finished already, {} to resume, {} to start, {} not buildable), "
               "{} at a time, {} thread(s) each",
               o.config, out, plan.runs.size() - skipped, finished, resumed, todo.size() - resumed, skipped, jobs,
               o.threads);
  std::set<std::string> told;
  for (const auto& run : plan.runs)
    if (!run.skipped.empty() && told.insert(run.variant).second)
      spdlog::info("not run: {}: {}", run.variant, run.skipped);

  std::vector<Job> pool_jobs;
  for (size_t i = 0; i < todo.size(); ++i) pool_jobs.push_back({todo[i]->id, argvs[i], plan.log_path(*todo[i])});
  GridProgress progress(plan, todo, finished, o.progress);
  g_interrupted.store(false);
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  struct sigaction old_int {}, old_term {};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  const auto outcomes = run_pool(
      pool_jobs, jobs, [&](const PoolStatus& s) { progress.tick(s); },
      [&](const JobOutcome& out) { progress.done(out); }, 1.0, &g_interrupted);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  if (g_interrupted.load()) {
    spdlog::warn("interrupted: finished runs are kept; rerun `{}` to continue", command);
    return 130;
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

  if (!summary.unfinished.empty()) {
    spdlog::error("{} run(s) have no results ({} failed in this pass); their logs are in {}/logs. Finished runs are "
                  "kept: rerun `{}` to retry only those.",
                  summary.unfinished.size(), failed, out, command);
    return 1;
  }
  return 0;
}

}  // namespace posenc
