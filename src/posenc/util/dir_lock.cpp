#include "posenc/util/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "posenc/errors.h"

namespace posenc {
namespace fs = std::filesystem;

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& lock_name, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create directory " + dir + ": " + ec.message());
  const std::string path = (fs::path(dir) / lock_name).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot create the lock file " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    const auto n = ::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    throw LockError("another " + what + " is running on " + dir + (n > 0 ? " (pid " + std::string(buf) + ")" : "") +
                    "; wait for it or stop it first");
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // the pid is only informative
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace posenc
