#include "posenc/experiments/compare.h"
#include "posenc/train/fits.h"
#include "posenc/util/python.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <torch/cuda.h>
#include <spdlog/spdlog.h>

#include "posenc/experiments/compare_plan.h"
#include "posenc/experiments/process_pool.h"
#include "posenc/experiments/report.h"
#include "posenc/experiments/summary.h"
#include "posenc/compat.h"
#include "posenc/train/run_dir.h"
#include "posenc/util/dir_lock.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/text.h"
#include "posenc/util/io.h"
#include "posenc/util/process.h"
#include "posenc/util/output_guard.h"

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
    // Work done by this invocation, in runs: finished ones plus the running ones' progress.
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

/// The command that reruns this comparison (for messages and the report).
std::string compare_command(const CompareOptions& o) {
  std::string command = "posenc compare " + o.config + (o.full ? " --full" : "");
  if (!o.out.empty()) command += " --out " + o.out;
  return command;
}

/// OUT/configs/<id>.json: the config the run's `posenc train` reads.
void write_run_config(const ComparePlan& plan, const PlannedRun& run) {
  write_file_atomic(plan.config_path(run), config_to_json(run.config).dump(2) + "\n");
}

/// The runs still to train and how the others stand, decided before any starts:
/// a run directory made from another config stops the comparison untouched.
struct Work {
  std::vector<const PlannedRun*> todo;
  std::vector<bool> resume;  ///< per todo entry
  size_t finished = 0, diverged = 0, skipped = 0, resumed = 0;
};

Work work_to_do(const ComparePlan& plan) {
  Work w;
  for (const auto& run : plan.runs) {
    if (!run.skipped.empty()) {
      ++w.skipped;
      continue;
    }
    const RunState state = run_state(plan, run);
    if (state == RunState::Finished) {
      ++w.finished;
    } else if (state == RunState::Diverged) {  // deterministic: a rerun would diverge at the same step
      ++w.diverged;
    } else {
      w.todo.push_back(&run);
      w.resume.push_back(state == RunState::Resumable);
      w.resumed += state == RunState::Resumable;
    }
  }
  return w;
}

/// Summary, report and figures from the runs that have results. A stop (SIGINT, SIGTERM, SIGHUP) while the figure
/// script runs ends the script and returns 128 + the signal; what was written is whole (every write is atomic).
int write_outputs(const ComparePlan& plan, const CompareOptions& o, const std::string& out, size_t failed) {
  const InterruptGuard stop_cleanly;
  const std::string command = compare_command(o);
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
    if (o.figures && interrupt_signal() == 0) plots = run_plot_script(out, &interrupt_flag());
  } else {
    plots.message = "no finished runs to plot";
  }
  if (const int sig = interrupt_signal()) {
    spdlog::warn(
        "stopped by {} while writing the outputs: summary.json, .csv and .md are written; rerun `{}` for the "
        "figures and report.md",
        signal_name(sig), command);
    return 128 + sig;
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
    const std::string ids = join(summary.unfinished, ", ");
    if (o.collect)
      spdlog::warn("{} run(s) have no results yet: {}; `{} --status` shows where they stand", summary.unfinished.size(),
                   ids, command);
    else
      spdlog::error(
          "{} run(s) have no results ({} failed in this pass); their logs are in {}/logs. Finished runs are "
          "kept: rerun `{}` to retry only those.",
          summary.unfinished.size(), failed, out, command);
    return 1;
  }
  return summary.diverged.empty() ? 0 : 1;
}

// ---------------------------------------------------------------- Slurm

fs::path jobs_file(const std::string& out) { return fs::path(out) / "slurm" / "jobs.json"; }

/// What compare --slurm recorded in OUT (slurm/jobs.json), or an empty object.
nlohmann::json jobs_record(const std::string& out) {
  return fs::exists(jobs_file(out)) ? read_json_file(jobs_file(out).string()) : nlohmann::json::object();
}

/// The job ids of a jobs record (oldest first).
std::vector<std::string> recorded_jobs(const nlohmann::json& record) {
  std::vector<std::string> ids;
  for (const auto& a : record.value("arrays", nlohmann::json::array()))
    if (a.contains("job_id") && a["job_id"].is_string() &&
        std::find(ids.begin(), ids.end(), a["job_id"].get<std::string>()) == ids.end())
      ids.push_back(a["job_id"]);
  return ids;
}

/// The array tasks in the queue that run a script of the record which posenc
/// did not submit (no sbatch where it ran, or sbatch failed): the user
/// submitted it by hand.
std::map<std::string, ScriptTask> tasks_submitted_by_hand(const nlohmann::json& record) {
  std::vector<std::string> scripts;
  for (const auto& a : record.value("arrays", nlohmann::json::array()))
    if (!a.contains("job_id")) scripts.push_back(a.value("script", ""));
  return queue_by_script(scripts);
}

/// Refuses to train or submit while arrays recorded in OUT still have tasks
/// in the queue: they would train the same runs twice.
void refuse_while_arrays_run(const std::string& out, const std::string& command) {
  const nlohmann::json record = jobs_record(out);
  if (const auto by_hand = tasks_submitted_by_hand(record); !by_hand.empty())
    throw ConfigError(
        fmt::format("{} Slurm array task(s) of a job submitted by hand ({}) still pending or running on this grid; `{} "
                    "--status` shows them",
                    by_hand.size(), by_hand.begin()->first.substr(0, by_hand.begin()->first.find('_')), command));
  const auto ids = recorded_jobs(record);
  if (ids.empty()) return;
  const QueueState q = queue_state(ids);
  const std::string jobs = join(ids, ", ");
  if (!q.known)
    throw ConfigError(out + " has Slurm job arrays (" + jobs +
                      ") and squeue cannot say here whether they still run: `" + command +
                      " --collect` summarizes what is finished; once they are over, remove " + jobs_file(out).string() +
                      " to train here");
  if (!q.tasks.empty())
    throw ConfigError(
        fmt::format("{} Slurm array task(s) of job {} still pending or running on this grid; `{} "
                    "--status` shows them, `{} --collect` summarizes what is finished",
                    q.tasks.size(), jobs, command, command));
}

SlurmSettings merged_settings(const ComparePlan& plan, const SlurmFlags& flags) {
  SlurmSettings s = read_slurm_settings(plan.slurm, plan.source + ".slurm");
  // A flag wins over the block's key, and is checked by the same declaration.
  for (const auto& [key, flag, value] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"partition", "--partition", flags.partition},
                                                                      {"time", "--time", flags.time},
                                                                      {"account", "--account", flags.account}})
    if (!value.empty()) set_slurm_setting(s, key, value, flag);
  if (flags.gpus_per_task >= 0) set_slurm_setting(s, "gpus_per_task", flags.gpus_per_task, "--gpus-per-task");
  if (flags.ntasks_per_run >= 0) set_slurm_setting(s, "ntasks_per_run", flags.ntasks_per_run, "--ntasks-per-run");
  for (const auto& line : flags.sbatch) set_slurm_setting(s, "sbatch", line, "--sbatch=" + line);
  // Each rank trains an equal slice of every batch: refused now, not in the queue.
  for (const auto& run : plan.runs)
    if (run.skipped.empty() && run.config.train.batch_size % s.ntasks_per_run != 0)
      throw ConfigError(
          fmt::format("ntasks_per_run={}: run {} has train.batch_size={}, which {} ranks cannot share "
                      "evenly; choose a number of ranks that divides it",
                      s.ntasks_per_run, run.id, run.config.train.batch_size, s.ntasks_per_run));
  return s;
}

/// Writes one array script per MaxArraySize runs still to do and submits each
/// with sbatch (or prints the command where there is none); records the job ids.
int submit_arrays(const ComparePlan& plan, const CompareOptions& o, const std::string& out, const Work& w) {
  const SlurmSettings settings = merged_settings(plan, o.slurm_flags);
  if (w.todo.empty()) {
    spdlog::info("every run already has results (or diverged): nothing to submit; `{} --collect` writes the summary",
                 compare_command(o));
    return 0;
  }
  const fs::path abs_out = fs::absolute(out);
  fs::create_directories(abs_out / "logs");
  fs::create_directories(abs_out / "slurm");
  std::vector<std::string> ids;
  for (const auto* run : w.todo) {
    write_run_config(plan, *run);
    ids.push_back(run->id);
  }
  std::vector<std::string> task = {self_executable(), "compare",   fs::absolute(plan.source).string(), "--out",
                                   abs_out.string(),  "--threads", std::to_string(o.threads),          "--no-progress",
                                   "--no-figures"};
  if (o.full) task.push_back("--full");
  task.push_back("--run");
  const bool sbatch = on_path("sbatch");
  nlohmann::json record = fs::exists(jobs_file(out)) ? read_json_file(jobs_file(out).string())
                                                     : nlohmann::json{{kWrittenBy, "posenc compare --slurm"}};
  if (!record.contains("arrays")) record["arrays"] = nlohmann::json::array();
  const auto arrays = split_into_arrays(ids, sbatch ? cluster_max_array_size() : 1001);
  // --jobs N holds for the grid, not per array: each later array waits for the
  // one before it to end (a short tail of fewer than N at the seam).
  const bool chained = o.jobs > 0 && arrays.size() > 1;
  if (chained)
    for (const auto& line : settings.sbatch)
      if (line.rfind("--dependency", 0) == 0 || line.rfind("-d", 0) == 0)
        throw ConfigError(fmt::format(
            "{}: the grid's {} runs need {} job arrays, which posenc chains with --dependency so that --jobs {} "
            "holds for all of them; leave this option out, or leave out --jobs",
            line, ids.size(), arrays.size(), o.jobs));
  if (chained && !sbatch)
    spdlog::warn(
        "the grid needs {} job arrays: submit each after the one before it has ended (sbatch "
        "--dependency=afterany:JOB), or more than --jobs {} tasks run at once",
        arrays.size(), o.jobs);
  std::string previous_job;
  for (size_t i = 0; i < arrays.size(); ++i) {
    ArraySpec a;
    a.job_name = "posenc-" + fs::path(plan.source).stem().string();
    a.run_ids = arrays[i];
    a.throttle = o.jobs;
    if (chained) a.after_job = previous_job;
    a.cpus_per_task = o.threads;
    a.log_dir = (abs_out / "logs").string();
    a.workdir = fs::current_path().string();
    a.task_command = task;
    const std::string script = (abs_out / "slurm" / fmt::format("array-{}.sh", record["arrays"].size())).string();
    write_file_atomic(script, array_script(a, settings));
    fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
    nlohmann::json entry = {{"script", script}, {"runs", a.run_ids}};
    if (sbatch) {
      try {
        entry["job_id"] = submit_with_sbatch(script);
      } catch (const ConfigError& e) {  // recorded, so that --status says why these runs do not start
        entry["sbatch_error"] = one_line(e.what(), 400);
        record["arrays"].push_back(entry);
        write_file_atomic(jobs_file(out).string(), record.dump(2) + "\n");
        throw;
      }
      previous_job = entry["job_id"].get<std::string>();
      spdlog::info("submitted {} ({} run(s)): job {}{}", script, a.run_ids.size(), previous_job,
                   a.after_job.empty() ? "" : ", to start once job " + a.after_job + " has ended");
    } else {
      spdlog::warn("sbatch is not on PATH here: submit it from a login node with `sbatch {}`", script);
    }
    record["arrays"].push_back(entry);
    write_file_atomic(jobs_file(out).string(), record.dump(2) + "\n");  // after each: a failed sbatch keeps the rest
  }
  spdlog::info("{} run(s) in {} array(s) ({} to resume); `{} --status` follows them, `{} --collect` summarizes",
               ids.size(), arrays.size(), w.resumed, compare_command(o), compare_command(o));
  return 0;
}

/// One run of the grid, as an array task runs it: started, resumed from its
/// checkpoint, or nothing to do, decided now. Replaces this process by
/// `posenc train`, so that Slurm's SIGTERM reaches it directly.
int run_one(const ComparePlan& plan, const std::string& id) {
  const auto it = std::find_if(plan.runs.begin(), plan.runs.end(), [&](const PlannedRun& r) { return r.id == id; });
  if (it == plan.runs.end()) throw ConfigError("--run " + id + ": no run of that name in " + plan.source);
  if (!it->skipped.empty()) throw ConfigError("--run " + id + ": not buildable: " + it->skipped);
  const RunState state = run_state(plan, *it);
  if (state == RunState::Finished || state == RunState::Diverged) {
    spdlog::info("{} {} already: nothing to do", id, state == RunState::Finished ? "finished" : "diverged");
    return 0;
  }
  write_run_config(plan, *it);
  std::vector<std::string> args = {self_executable(), "train", plan.config_path(*it), "--no-progress"};
  if (state == RunState::Resumable) args.push_back("--resume");
  spdlog::info("{}: {} `{}`", id, state == RunState::Resumable ? "resuming" : "starting", plan.config_path(*it));
  std::fflush(stdout);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(errno));
}

/// Where each run stands: from its directory (results, checkpoint, the train
/// lock, its log) and, for recorded arrays, from squeue.
int show_status(const ComparePlan& plan, const std::string& out) {
  const nlohmann::json record = jobs_record(out);
  const std::vector<std::string> jobs = recorded_jobs(record);
  const QueueState q = queue_state(jobs);
  std::map<std::string, std::string> queue_of_run;  // run id -> "PENDING (job 12_3)"
  std::map<std::string, std::string> unsubmitted;   // run id -> why its array is not in the queue
  const auto by_script = tasks_submitted_by_hand(record);
  for (const auto& a : record.value("arrays", nlohmann::json::array())) {
    const auto& runs = a.at("runs");
    const std::string script = a.value("script", "");
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::string index = "_" + std::to_string(i);
      queue_of_run.erase(runs[i]);  // the latest array that holds a run speaks for it
      unsubmitted.erase(runs[i]);
      if (a.contains("job_id")) {
        const std::string task = a["job_id"].get<std::string>() + index;
        const auto t = q.tasks.find(task);
        if (t != q.tasks.end()) queue_of_run[runs[i]] = t->second + " (job " + task + ")";
        continue;
      }
      bool queued = false;
      for (const auto& [task, st] : by_script)
        if (st.script == script && task.size() > index.size() &&
            task.compare(task.size() - index.size(), index.size(), index) == 0) {
          queue_of_run[runs[i]] = st.state + " (job " + task + ", submitted by hand)";
          queued = true;
        }
      if (queued) continue;
      std::string why = "written where sbatch was not on PATH: submit it with `sbatch " + script + "`";
      if (a.contains("sbatch_error")) {  // "sbatch SCRIPT failed (exit 1): ..." without the script's path
        why = a["sbatch_error"].get<std::string>();
        if (const std::string path = "sbatch " + script + " "; why.rfind(path, 0) == 0)
          why = "sbatch " + why.substr(path.size());
      }
      unsubmitted[runs[i]] = why;
    }
  }
  Table table = {{"run", "state", "step", "slurm", "note"}};
  std::map<std::string, int> counts;
  for (const auto& run : plan.runs) {
    if (!run.skipped.empty()) continue;
    const fs::path dir = plan.run_dir(run);
    std::string state, note;
    try {
      const RunState s = run_state(plan, run);
      bool locked = false;
      if (fs::exists(dir / run_files::kTrainLock)) {
        try {
          const DirectoryLock probe(dir.string(), run_files::kTrainLock, "posenc train");
        } catch (const LockError&) {  // held: a posenc train is on it
          locked = true;
        }
      }
      if (s == RunState::Finished)
        state = "done";
      else if (s == RunState::Diverged)
        state = "diverged", note = diverged_message(dir);
      else if (locked)
        state = "running";
      else if (s == RunState::Resumable)
        state = "stopped";
      else if (fs::exists(plan.log_path(run)) && fs::file_size(plan.log_path(run)) > 0 && !queue_of_run.count(run.id))
        state = "failed", note = one_line(tail_lines(plan.log_path(run), 1), 100);
      else if (queue_of_run.count(run.id) && queue_of_run[run.id].rfind("RUNNING", 0) == 0)
        state = "starting";  // its task runs; its directory is not there yet
      else if (unsubmitted.count(run.id))
        state = "unsubmitted", note = one_line(unsubmitted[run.id], 200);
      else
        state = "pending";
    } catch (const ConfigError& e) {
      state = "foreign", note = one_line(e.what(), 100);
    }
    ++counts[state];
    const int64_t step = logged_step(dir / run_files::kMetrics);
    table.push_back({run.id, state, step > 0 ? fmt::format("{}/{}", step, run.config.train.steps) : "-",
                     queue_of_run.count(run.id) ? queue_of_run[run.id] : "-", note});
  }
  std::printf("%s", render_text(table, 2).c_str());
  std::string line;
  for (const auto& [state, n] : counts) line += fmt::format("{}{} {}", line.empty() ? "" : ", ", n, state);
  std::printf("%s%s\n", line.c_str(),
              jobs.empty() ? ""
              : q.known    ? ""
                           : " (squeue is not available here: queue states unknown)");
  std::fflush(stdout);
  return 0;
}

}  // namespace

/// What compare writes in its --out, and what says a directory is another's.
OutputDirectory compare_outputs() {
  OutputDirectory spec;
  spec.flag = "--out";
  spec.writer = "posenc compare";
  spec.files = {"summary.json", "summary.csv", "summary.md", "report.md"};
  spec.foreign = run_files::train_run_files();
  spec.foreign.push_back("bench.json");
  // compare's lock file stays in its root: a directory that has one is compare's.
  spec.ours = [](const fs::path& dir) { return fs::exists(dir / run_files::kCompareLock); };
  return spec;
}

/// Runs side by side when --jobs is not given: one per core; where the runs
/// train on a GPU, also no more than its free memory holds, at a CUDA context
/// (about 0.6 GiB per process) plus the largest run's estimated peak each.
int default_jobs(const ComparePlan& plan) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool cuda = torch::cuda::is_available();
  double per_run = 0;
  for (const auto& run : plan.runs) {
    if (!run.skipped.empty() || run.config.train.device == Device::Cpu || !cuda) continue;
    per_run = std::max(per_run, run_memory_bytes(run.config, torch::kCUDA));
  }
  if (per_run <= 0) return cores;
  const double free = compat::cuda_free_memory_bytes(0);
  if (free <= 0) return cores;  // unknown in a build without -DPOSENC_CUDA=ON
  const double context = 0.6 * 1024 * 1024 * 1024;
  const int fit = static_cast<int>(0.9 * free / (per_run + context));
  const int jobs = std::clamp(fit, 1, cores);
  spdlog::info("--jobs {} by default: {} cores, {} of GPU memory free, about {} per run", jobs, cores,
               format_bytes(free), format_bytes(per_run + context));
  return jobs;
}

int run_comparison(const CompareOptions& o) {
  const std::string out = o.out.empty() ? default_out(o) : o.out;
  const ComparePlan plan = plan_comparison(o.config, out, o.full, o.threads);
  const int jobs = o.jobs > 0 ? o.jobs : (o.run_id.empty() && !o.status && !o.collect ? default_jobs(plan) : 1);
  if (!o.run_id.empty()) return run_one(plan, o.run_id);
  if (o.status) return show_status(plan, out);
  // A train run's directory is not a comparison's (taking it over would break
  // its --resume), and a user's own summary.md is not replaced.
  check_output_directory(out, compare_outputs());
  if (o.slurm) merged_settings(plan, o.slurm_flags);  // a bad "slurm" block fails before anything is written
  if (o.figures && !o.slurm) check_posenc_python("matplotlib, numpy");  // now, not after hours of training
  const DirectoryLock lock(out, run_files::kCompareLock, "posenc compare");
  if (o.collect) return write_outputs(plan, o, out, 0);
  int stale = 0;
  for (const char* sub : {"", "configs", "inspect", "attention", "slurm"})
    stale += remove_stale_temporaries((fs::path(out) / sub).string());
  if (const int n = stale) spdlog::info("removed {} temporary file(s) left in {} by interrupted writes", n, out);
  const std::string command = compare_command(o);
  refuse_while_arrays_run(out, command);

  const Work w = work_to_do(plan);
  // Without --jobs a Slurm grid has no throttle: the scheduler decides.
  const std::string slurm_at_once = o.slurm && o.jobs == 0 ? "as many at a time as Slurm allows (--jobs N caps it)"
                                                           : fmt::format("{} at a time", jobs);
  spdlog::info(
      "compare {} -> {}: {} runs ({} finished already, {} diverged already, {} to resume, {} to start, {} not "
      "buildable), {} {}, {} thread(s) each",
      o.config, out, plan.runs.size() - w.skipped, w.finished, w.diverged, w.resumed, w.todo.size() - w.resumed,
      w.skipped, o.slurm ? "as Slurm array tasks," : "locally,", slurm_at_once, o.threads);
  std::set<std::string> told;
  for (const auto& run : plan.runs)
    if (!run.skipped.empty() && told.insert(run.variant).second)
      spdlog::info("not run: {}: {}", run.variant, run.skipped);
  if (o.slurm) return submit_arrays(plan, o, out, w);

  // The running binary itself, even if a rebuild has replaced the file since it started.
  const std::string self = "/proc/self/exe";
  std::vector<Job> pool_jobs;
  for (size_t i = 0; i < w.todo.size(); ++i) {
    const PlannedRun& run = *w.todo[i];
    write_run_config(plan, run);
    std::vector<std::string> argv = {self, "train", plan.config_path(run), "--no-progress"};
    if (w.resume[i]) argv.push_back("--resume");
    pool_jobs.push_back({run.id, argv, plan.log_path(run)});
  }
  GridProgress progress(plan, w.todo, w.finished, o.progress);
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
  return write_outputs(plan, o, out, failed);
}

}  // namespace posenc
