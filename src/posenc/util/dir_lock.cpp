#include "posenc/util/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "posenc/errors.h"

namespace posenc {
namespace fs = std::filesystem;

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& lock_name, const std::string& what)
    : dir_(dir) {
  std::error_code ec;
  created_dir_ = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create directory " + dir + ": " + ec.message());
  path_ = (fs::path(dir) / lock_name).string();
  // A lock file may be removed by its holder (remove_if_created): one locked
  // after that is no longer the one at the path, so it is opened again.
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created_ = fd_ >= 0;
    if (fd_ < 0) fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError("cannot create the lock file " + path_ + ": " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {0};
      const auto n = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      fd_ = -1;
      throw LockError("another " + what + " is running on " + dir + (n > 0 ? " (pid " + std::string(buf) + ")" : "") +
                      "; wait for it or stop it first");
    }
    struct stat held {
    }, at_path{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &at_path) == 0 && held.st_ino == at_path.st_ino &&
        held.st_dev == at_path.st_dev)
      break;
    ::close(fd_);
    fd_ = -1;
    if (attempt == 100) throw IoError("cannot hold the lock file " + path_ + ": it keeps being replaced");
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // the pid is only informative
  }
}

void DirectoryLock::remove_if_created() {
  if (fd_ < 0 || !created_) return;
  ::unlink(path_.c_str());  // while held: a process waiting on it opens the path again
  std::error_code ec;
  if (created_dir_ && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace posenc
