#include "posenc/train/run_dir.h"
#include "posenc/util/io.h"

#include <algorithm>
#include <fstream>

namespace posenc {
namespace fs = std::filesystem;

namespace {

/// JSON pointers of the config keys declared with one of `parts`, a block's
/// pointer where every key of the block is ("/eval").
std::vector<std::string> keys_of_run_parts(std::initializer_list<RunPart> parts) {
  const auto among = [&](const OptionSpec& key) {
    return std::find(parts.begin(), parts.end(), key.run_part) != parts.end();
  };
  std::vector<std::string> out;
  for (const ConfigBlock& block : config_blocks()) {
    std::string pointer = "/" + block.path;
    for (auto& c : pointer) c = c == '.' ? '/' : c;
    if (std::all_of(block.keys.begin(), block.keys.end(), among)) {
      out.push_back(pointer);
      continue;
    }
    for (const OptionSpec& key : block.keys)
      if (among(key)) out.push_back(pointer + "/" + key.name);
  }
  return out;
}

}  // namespace

const std::vector<std::string>& resumable_changes() {
  static const std::vector<std::string> paths = keys_of_run_parts({RunPart::Resumable, RunPart::Where});
  return paths;
}

const std::vector<std::string>& same_run_changes() {
  static const std::vector<std::string> paths = keys_of_run_parts({RunPart::Where});
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
