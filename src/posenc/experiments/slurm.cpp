#include "posenc/experiments/slurm.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "posenc/errors.h"
#include "posenc/util/process.h"
#include "posenc/util/python.h"
#include "posenc/util/text.h"

namespace posenc {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

/// A value that goes on an #SBATCH line: one line, without control characters (checked_value has seen
/// that it is a non-empty string).
std::string sbatch_line(const json& v, const std::string& where) {
  const std::string s = v.get<std::string>();
  if (s.find_first_of("\n\r") != std::string::npos)
    throw ConfigError(where + ": must be one line (it goes on an #SBATCH line)");
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw ConfigError(where + ": holds a control character (byte " + std::to_string(static_cast<int>(c)) +
                        "), which has no place on an #SBATCH line");
  return s;
}

/// The sbatch options posenc writes itself, for the array, its logs and its
/// requeue on preemption: given again in "sbatch", they would break them.
const std::vector<std::string>& options_posenc_sets() {
  static const std::vector<std::string> names = {"--array",     "-a",         "--output", "-o",        "--error",
                                                 "-e",          "--wrap",     "--signal", "--requeue", "--no-requeue",
                                                 "--open-mode", "--parsable", "--ntasks", "-n"};
  return names;
}

/// One more #SBATCH option ("--qos=low"): an option, and none that posenc writes itself.
std::string sbatch_option(const json& v, const std::string& where) {
  const std::string line = sbatch_line(v, where);
  if (line.rfind("-", 0) != 0) throw ConfigError(where + ": expected an sbatch option such as --qos=low");
  const std::string name = line.substr(0, line.find_first_of("= "));
  for (const auto& own : options_posenc_sets())
    if (name == own || (own.size() == 2 && line.rfind(own, 0) == 0))
      throw ConfigError(where + ": " + name +
                        " is set by posenc itself (the array over the runs, their logs and their requeue on "
                        "preemption); leave it out");
  return line;
}

}  // namespace

const std::vector<OptionSpec>& slurm_block_keys() {
  auto key = [](std::string name, OptionKind kind, json default_value, std::string doc, double min = -1e300,
                double max = 1e300) {
    return OptionSpec{std::move(name), kind, std::move(default_value), std::move(doc), min, max};
  };
  static const std::vector<OptionSpec> keys = [&] {
    std::vector<OptionSpec> k = {
        key("partition", OptionKind::String, nullptr,
            "`#SBATCH --partition`: the partition the array tasks run in (left out: the cluster's default); one line"),
        key("time", OptionKind::String, nullptr,
            "`#SBATCH --time`: each task's time limit, in Slurm's forms (`90`, `2:00:00`, `1-12`); more than the " +
                std::to_string(kSlurmGraceSeconds) +
                " s before the limit at which each run is signalled to checkpoint (left out: the partition's)"),
        key("account", OptionKind::String, nullptr,
            "`#SBATCH --account`: the account the tasks are charged to (left out: the user's default); one line"),
        key("gpus_per_task", OptionKind::Int, 0,
            "`#SBATCH --gpus-per-task`: GPUs for each rank of a run; 0 asks for none", 0, 64),
        key("ntasks_per_run", OptionKind::Int, 1,
            "ranks per run: with N > 1 each run trains data parallel on N Slurm tasks started with `srun`, and "
            "`train.batch_size` must be a multiple of N",
            1, 1024),
        key("sbatch", OptionKind::StringList, json::array(),
            "more `#SBATCH` options, one per item (`\"--qos=low\"`, `\"--mem-per-cpu=4G\"`); not those posenc "
            "writes itself: `" +
                join(options_posenc_sets(), "`, `") + "`"),
    };
    k.back().max_items = 64;
    return k;
  }();
  return keys;
}

const OptionSpec& slurm_block_key(const std::string& name) {
  const OptionSpec* spec = find_option(slurm_block_keys(), name);
  if (spec == nullptr) throw std::logic_error("the \"slurm\" block declares no key " + name);
  return *spec;
}

void set_slurm_setting(SlurmSettings& s, const std::string& key, const json& value, const std::string& where) {
  const OptionSpec& spec = slurm_block_key(key);
  if (key == "sbatch") {
    // The block gives an array of options; a --sbatch flag gives one, and its errors name the flag as typed.
    const bool one = value.is_string();
    const json v = checked_value(spec, one ? json::array({value}) : value, where);
    for (size_t i = 0; i < v.size(); ++i)
      s.sbatch.push_back(sbatch_option(v[i], one ? where : where + "[" + std::to_string(i) + "]"));
    if (s.sbatch.size() > spec.max_items)
      throw ConfigError(where + ": " + std::to_string(s.sbatch.size()) + " sbatch options in all, more than the " +
                        std::to_string(spec.max_items) + " posenc takes");
    return;
  }
  const json v = checked_value(spec, value, where);
  if (key == "partition") s.partition = sbatch_line(v, where);
  if (key == "account") s.account = sbatch_line(v, where);
  if (key == "time") {
    s.time = sbatch_line(v, where);
    check_time_beyond_grace(s.time, where);
  }
  if (key == "gpus_per_task") s.gpus_per_task = v.get<int64_t>();
  if (key == "ntasks_per_run") s.ntasks_per_run = v.get<int64_t>();
}

SlurmSettings read_slurm_settings(const json& block, const std::string& where) {
  if (!block.is_object())
    throw ConfigError(where + ": expected an object of Slurm settings, got " + shown_value(block));
  resolve_options(slurm_block_keys(), block, where, "the grid's \"slurm\" block");  // unknown keys first
  SlurmSettings s;
  for (const auto& [key, value] : block.items()) set_slurm_setting(s, key, value, where + "." + key);
  return s;
}

int64_t slurm_time_seconds(const std::string& time) {
  static const std::regex days(R"(^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$)");
  static const std::regex clock(R"(^(\d+)(?::(\d+))?(?::(\d+))?$)");
  std::smatch m;
  const auto n = [&](size_t i) { return m[i].matched ? std::stoll(m[i].str()) : 0LL; };
  if (time.size() > 24) return -1;
  if (std::regex_match(time, m, days)) return ((n(1) * 24 + n(2)) * 60 + n(3)) * 60 + n(4);
  if (!std::regex_match(time, m, clock)) return -1;         // UNLIMITED, INFINITE, or a form sbatch judges
  if (m[3].matched) return (n(1) * 60 + n(2)) * 60 + n(3);  // hours:minutes:seconds
  return n(1) * 60 + n(2);                                  // minutes[:seconds]
}

void check_time_beyond_grace(const std::string& time, const std::string& where) {
  const int64_t seconds = slurm_time_seconds(time);
  if (seconds < 0 || seconds > kSlurmGraceSeconds) return;
  throw ConfigError(
      fmt::format("{}={} is {} s, not more than the {} s before the time limit at which Slurm signals each run to "
                  "checkpoint: every segment would be stopped as it starts; give more time (e.g. 1:00:00)",
                  where, time, seconds, kSlurmGraceSeconds));
}

std::string array_script(const ArraySpec& a, const SlurmSettings& s) {
  if (a.run_ids.empty()) throw std::invalid_argument("array_script: no runs");
  std::ostringstream o;
  o << "#!/bin/bash\n"
    << "# Written by posenc compare --slurm: task i of this job array trains run i of\n"
    << "# the list below; posenc decides when the task starts whether the run is new,\n"
    << "# resumes from its checkpoint, or is done.\n"
    << "#SBATCH --job-name=" << a.job_name << "\n"
    << "#SBATCH --array=0-" << a.run_ids.size() - 1 << (a.throttle > 0 ? "%" + std::to_string(a.throttle) : "") << "\n"
    << "#SBATCH --ntasks=" << s.ntasks_per_run << "\n"
    << "#SBATCH --cpus-per-task=" << a.cpus_per_task << "\n"
    << "#SBATCH --output=" << (fs::path(a.log_dir) / "slurm-%A_%a.log").string() << "\n"
    << "#SBATCH --open-mode=append\n"
    << "#SBATCH --signal=B:USR1@" << a.grace_s << "\n"
    << "#SBATCH --requeue\n";
  if (!s.partition.empty()) o << "#SBATCH --partition=" << s.partition << "\n";
  if (!s.time.empty()) o << "#SBATCH --time=" << s.time << "\n";
  if (!s.account.empty()) o << "#SBATCH --account=" << s.account << "\n";
  if (s.gpus_per_task > 0) o << "#SBATCH --gpus-per-task=" << s.gpus_per_task << "\n";
  if (!a.after_job.empty()) o << "#SBATCH --dependency=afterany:" << a.after_job << "\n";
  for (const auto& line : s.sbatch) o << "#SBATCH " << line << "\n";
  o << "\nset -u\nruns=(\n";
  for (const auto& id : a.run_ids) o << "  " << shell_quote(id) << "\n";
  o << ")\n"
    << "run=${runs[$SLURM_ARRAY_TASK_ID]}\n"
    << "cd " << shell_quote(a.workdir) << " || exit 1\n"
    << "echo \"$(date '+%F %T') task $SLURM_ARRAY_TASK_ID of job $SLURM_ARRAY_JOB_ID on $(hostname): $run\"\n";
  const std::string log = shell_quote(a.log_dir + "/") + "\"$run.log\"";
  o << "log=" << log << "\n"
    << "before=$(cat \"$log\" 2>/dev/null | wc -l)\n";
  if (s.ntasks_per_run > 1)
    o << "# The run's " << s.ntasks_per_run << " ranks, one per task: srun gives each its SLURM_PROCID. A rank that\n"
      << "# exits first must not end the others while rank 0 writes the checkpoint (--kill-on-bad-exit=0).\n"
      << "srun --ntasks=" << s.ntasks_per_run << " --cpus-per-task=" << a.cpus_per_task << " --kill-on-bad-exit=0 ";
  for (const auto& arg : a.task_command) o << shell_quote(arg) << " ";
  o << "\"$run\" >>\"$log\" 2>&1 &\n"
    << "child=$!\n"
    << "# Slurm sends USR1 to this script " << a.grace_s << " s before the time limit; preemption and scancel send\n"
    << "# TERM, to this script or (--full, PreemptMode=REQUEUE) to every process of the job. Either way posenc gets\n"
    << "# exactly one SIGTERM from here (a repeat from Slurm itself is the same stop to posenc): it checkpoints\n"
    << "# the current step and exits 143.\n"
    << "forwarded=\n";
  if (s.ntasks_per_run > 1)
    o << "# A SIGTERM to srun itself cancels the step, killing the ranks before they checkpoint: the ranks get it\n"
      << "# from scancel, which without --batch or --full signals the step's tasks only. (Where Slurm signals every\n"
      << "# process, srun too, the ranks are killed and the run resumes from its last periodic checkpoint.)\n"
      << "stop() { [ -n \"$forwarded\" ] && return; forwarded=1; scancel --signal=TERM \"$SLURM_JOB_ID\"; }\n";
  else
    o << "stop() { [ -n \"$forwarded\" ] && return; forwarded=1; kill -TERM \"$child\" 2>/dev/null; }\n";
  o << "trap stop USR1 TERM\n"
    << "wait \"$child\"\n"
    << "status=$?\n"
    << "while kill -0 \"$child\" 2>/dev/null; do\n"
    << "  wait \"$child\"\n"
    << "  status=$?\n"
    << "done\n"
    << "if [ \"$status\" -eq 143 ]; then\n"
    << "  # What the run wrote, from its own log (this segment's lines only).\n"
    << "  said=$(tail -n +$((before + 1)) \"$log\" 2>/dev/null | grep -a 'stopped by SIG' | tail -n 1)\n"
    << "  said=${said#* info }\n"
    << "  echo \"$(date '+%F %T') $run: ${said:-ended by SIGTERM without a checkpoint line in $log; it resumes from "
       "its last checkpoint, if any}; back in the queue\"\n"
    << "  scontrol requeue \"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"\n"
    << "fi\n"
    << "exit \"$status\"\n";
  return o.str();
}

std::vector<std::vector<std::string>> split_into_arrays(const std::vector<std::string>& ids, int64_t max_array_size) {
  if (max_array_size < 1) throw std::invalid_argument("split_into_arrays: max_array_size < 1");
  std::vector<std::vector<std::string>> arrays;
  for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(max_array_size))
    arrays.emplace_back(
        ids.begin() + static_cast<std::ptrdiff_t>(i),
        ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + static_cast<size_t>(max_array_size))));
  return arrays;
}

int64_t cluster_max_array_size() {
  constexpr int64_t kSlurmDefault = 1001;
  std::string out;
  if (run_command({"scontrol", "show", "config"}, out) != 0) return kSlurmDefault;
  static const std::regex line(R"(MaxArraySize\s*=\s*([0-9]+))");
  std::smatch m;
  if (!std::regex_search(out, m, line)) return kSlurmDefault;
  const int64_t max = std::stoll(m[1].str());
  return max > 0 ? max : kSlurmDefault;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  return false;
}

std::string submit_with_sbatch(const std::string& script) {
  std::string out;
  const int rc = run_command({"sbatch", "--parsable", script}, out);
  // --parsable prints "JOBID" or "JOBID;CLUSTER"; a wrapper that drops it, "Submitted batch job JOBID".
  static const std::regex id(R"(^\s*([0-9]+)(;\S+)?\s*$)");
  static const std::regex plain(R"(^\s*Submitted batch job ([0-9]+)\b[^\n]*\s*$)");
  std::smatch m;
  if (rc != 0 || !(std::regex_match(out, m, id) || std::regex_match(out, m, plain)))
    throw ConfigError("sbatch " + script + " failed (exit " + std::to_string(rc) + "): " + one_line(out, 400));
  return m[1].str();
}

QueueState queue_state(const std::vector<std::string>& job_ids) {
  QueueState q;
  if (job_ids.empty()) {
    q.known = true;
    return q;
  }
  const std::string ids = join(job_ids, ",");
  std::string out;
  // -r: one line per array task; %i: JOBID_TASK; %T: the state's full name.
  const int rc = run_command({"squeue", "-h", "-r", "-j", ids, "-o", "%i %T"}, out);
  // Jobs that have left Slurm's memory altogether make squeue say "Invalid job id".
  if (rc != 0 && out.find("Invalid job id") == std::string::npos) return q;
  q.known = true;
  if (rc != 0) return q;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string task, state;
    if (fields >> task >> state) q.tasks[task] = state;
  }
  return q;
}

std::map<std::string, ScriptTask> queue_by_script(const std::vector<std::string>& scripts) {
  std::map<std::string, ScriptTask> found;
  if (scripts.empty()) return found;
  std::string out;
  // %o: the batch script as Slurm holds it (absolute); -r: one line per array task.
  if (run_command({"squeue", "-h", "-r", "-o", "%i %T %o"}, out) != 0) return found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string task, state, script;
    if (!(fields >> task >> state >> script)) continue;
    if (std::find(scripts.begin(), scripts.end(), script) != scripts.end()) found[task] = {script, state};
  }
  return found;
}

}  // namespace posenc
