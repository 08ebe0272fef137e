// An exclusive lock on a directory, held for the life of the object: two
// processes writing one run directory (two `train --out X`, two `compare` on
// one root) would overwrite each other's results. The lock is flock(2) on
// DIR/NAME, so it goes away with the process, however it ends.
#pragma once

#include <string>

namespace posenc {

class DirectoryLock {
 public:
  /// Creates `dir` if needed and locks DIR/lock_name; throws ConfigError naming
  /// the other process (`what`: "posenc train", "posenc compare") if it is held.
  DirectoryLock(const std::string& dir, const std::string& lock_name, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  /// For a command refused before it wrote anything: removes the lock file if
  /// this lock created it, and the directory if it created that and it is
  /// empty, so that a refused command leaves nothing behind.
  void remove_if_created();

 private:
  std::string dir_, path_;
  int fd_ = -1;
  bool created_ = false, created_dir_ = false;
};

}  // namespace posenc
