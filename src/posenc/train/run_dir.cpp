#include "posenc/train/run_dir.h"
#include "posenc/util/io.h"

#include <fstream>

namespace posenc {
namespace fs = std::filesystem;

const std::vector<std::string>& resumable_changes() {
  // out_dir is where the run is, not what it is: a moved or copied run resumes.
  // How many processes train it, and how they talk, are not what it is either.
  static const std::vector<std::string> paths = {
      "/train/steps",       "/train/threads", "/train/device",    "/train/log_every",
      "/train/out_dir",     "/train/backend", "/train/bucket_mb", "/train/collective_timeout_s",
      "/train/cuda_graphs", "/eval"};
  return paths;
}

std::string resumable_changes_text() {
  std::string out;
  const auto& paths = resumable_changes();
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string dotted = paths[i].substr(1);
    for (auto& c : dotted) c = c == '/' ? '.' : c;
    if (dotted.find('.') == std::string::npos) dotted += ".*";  // a whole section
    out += (i == 0 ? "" : i + 1 == paths.size() ? " and " : ", ") + dotted;
  }
  return out;
}

void check_fresh_directory(const fs::path& dir, const Config& cfg) {
  if (fs::exists(dir / run_files::kCheckpoint))
    throw ConfigError(dir.string() +
                      " already holds a run (checkpoint.pt); pass --resume to continue it or choose "
                      "another --out");
  for (const char* name : {run_files::kResults, run_files::kDiverged})
    if (fs::exists(dir / name))
      throw ConfigError(dir.string() + " holds " + name +
                        " of an earlier run but no checkpoint; choose another --out "
                        "or move that run away");
  const fs::path config = dir / run_files::kConfig;
  if (!fs::exists(config)) {
    // A fresh run starts metrics.jsonl empty: one without a run's config.json beside it is someone else's.
    if (fs::exists(dir / run_files::kMetrics))
      throw ConfigError(dir.string() + " holds a " + run_files::kMetrics +
                        " but no posenc run (no config.json); posenc does not replace it: choose another --out");
    return;
  }
  std::string at;
  try {
    at = first_difference(config_from_json(read_json_file(config.string())), cfg, resumable_changes());
  } catch (const ConfigError& e) {
    throw ConfigError(dir.string() + " holds a config.json that is not a posenc run config (" + e.what() +
                      "); choose another --out");
  }
  if (!at.empty())
    throw ConfigError(dir.string() + " holds config.json of another run (first difference at " + at +
                      ") and no checkpoint; choose another --out or move that run away");
}

void truncate_metrics(const fs::path& file, int64_t step) {
  if (!fs::exists(file)) return;
  std::ifstream in(file);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).value("step", int64_t{0}) <= step) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
      // a line cut short by a kill: drop it
    }
  }
  write_file_atomic(file.string(), kept);
}

}  // namespace posenc
