// The one guard of what a command writes, checked before any work: where a
// file or directory may be, that it is writable (probed, so that a read-only
// target fails in a second, not after an hour of evaluation), and which
// existing files may be replaced (only those the same command wrote). Every
// command's output flag (train's run directory, compare's and bench's --out,
// eval's, generate's, inspect's and attention's files) goes through it.
// No torch here.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace posenc {

/// Refuses (ConfigError naming `flag`) a directory for outputs that is the
/// filesystem's root, or inside /dev (but /dev/shm, memory-backed scratch
/// space), /proc or /sys.
void check_not_system_location(const std::filesystem::path& dir, const std::string& flag);

/// Refuses (ConfigError naming `flag`) an existing directory in which a file
/// cannot be created: a temporary file is made and removed.
void probe_writable(const std::filesystem::path& dir, const std::string& flag);

/// Refuses (ConfigError naming `flag` and the file) an output path that posenc
/// may not write: a directory, a path whose directory is missing or is not
/// writable, or an existing file that `writer` ("posenc eval") did not write:
/// only a JSON object whose "written_by" is `writer`, or one `also_ours`
/// accepts, may be replaced. So a typo cannot put results over a checkpoint or
/// a config.
void check_output_target(const std::string& path, const std::string& flag, const std::string& writer,
                         bool (*also_ours)(const nlohmann::json& object) = nullptr);

/// True where `path` is a JSON object that `writer` wrote (its "written_by"),
/// or one `also_ours` accepts (files from before the marker); false for
/// anything else, a file that cannot be read or one larger than any output.
bool written_by(const std::string& path, const std::string& writer,
                bool (*also_ours)(const nlohmann::json& object) = nullptr);

/// What a command fills one output directory with (compare's and bench's --out).
struct OutputDirectory {
  std::string flag;                ///< "--out"
  std::string writer;              ///< "posenc bench"
  std::vector<std::string> files;  ///< the files it writes there, replaced on a rerun
  std::vector<std::string>
      foreign;  ///< files that say the directory is another command's (a train run's checkpoint.pt)
  /// True where the directory is already `writer`'s (its own earlier output),
  /// so that its `files` may be replaced.
  bool (*ours)(const std::filesystem::path& dir) = nullptr;
};

/// Refuses (ConfigError, one line naming the flag and the file) a directory
/// the command may not fill: a system location, an existing file, another
/// command's directory, one it cannot write, or one holding a file of the
/// same name as one of its outputs that it did not write (a user's own
/// summary.md). Creates nothing.
void check_output_directory(const std::string& dir, const OutputDirectory& spec);

}  // namespace posenc
