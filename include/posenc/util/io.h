// Writing files so that nothing a user has is lost: every write goes to a
// temporary file in the same directory and is renamed over the target only
// once it is complete and synced. A failure (disk full, read-only, quota)
// removes the temporary file, leaves the previous version untouched and throws
// IoError naming the file and the system's reason. No torch here.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "posenc/errors.h"

namespace posenc {

/// What a temporary file's name adds to its target's, before the writer's pid:
/// a name of posenc's own, so that clean-up never takes a user's NAME.tmp.N.
inline constexpr const char* kTemporaryInfix = ".posenc-tmp.";

/// Writes `bytes` to `path` atomically (PATH.posenc-tmp.PID, fsync, rename).
void write_file_atomic(const std::string& path, const std::string& bytes);

/// The key of posenc's JSON outputs that names the command that wrote them ("posenc eval").
inline constexpr const char* kWrittenBy = "written_by";

/// Reads a whole regular file of at most `max_bytes`; IoError naming it if it
/// cannot, if it is a directory, device or pipe (/dev/zero would never end), or
/// if it is larger.
std::string read_file(const std::string& path, std::uintmax_t max_bytes = UINTMAX_MAX);

/// A text file for posenc to read line by line (sources to translate, pairs
/// to train on): read_file's checks, then valid UTF-8 (IoError naming the file
/// and the first bad byte), without a leading byte-order mark (U+FEFF, which
/// editors on Windows write and which is no part of the first word).
std::string read_text_file(const std::string& path, std::uintmax_t max_bytes);
/// `text` without a leading UTF-8 byte-order mark.
std::string without_bom(const std::string& text);

/// FNV-1a, 64 bits, as 16 hex digits: enough to tell a replaced or edited data
/// file from the one a run trained on (not a cryptographic hash).
std::string fnv1a_checksum(const std::string& bytes);

/// An append-only text file (metrics.jsonl) whose lines are written whole or
/// not at all: a failed append is cut back off and reported as IoError.
class AppendFile {
 public:
  explicit AppendFile(std::string path);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  void write_line(const std::string& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

/// Deletes NAME.posenc-tmp.PID files left in `dir` (not recursive) by writes that a
/// kill or a crash interrupted: only those whose process PID is gone. Call it only while holding the directory's
/// lock, so that no live writer owns them. Returns how many it removed.
int remove_stale_temporaries(const std::string& dir);

/// Fault injection for tests: with POSENC_FAIL_WRITE=N in the environment, the
/// Nth write of this process (atomic writes and appends, counted together, from
/// 1) fails as if the disk were full (ENOSPC). Returns true when this write is
/// the one to fail.
bool injected_write_failure();

/// "" if text is valid UTF-8, else what is wrong and where ("byte 0xff at
/// offset 3 is not valid UTF-8"): configs, paths and results are JSON, which
/// holds only UTF-8.
std::string utf8_problem(const std::string& text);

}  // namespace posenc
