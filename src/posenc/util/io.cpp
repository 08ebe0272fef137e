#include "posenc/util/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <regex>
#include <vector>

namespace posenc {
namespace fs = std::filesystem;

namespace {

std::string reason(int err) { return std::strerror(err); }

IoError write_error(const std::string& path, int err) { return IoError("cannot write " + path + ": " + reason(err)); }

/// Writes all of `size` bytes or returns the errno of the failure (0 on success).
int write_all(int fd, const char* data, size_t size) {
  if (injected_write_failure()) return ENOSPC;
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

void create_parent(const fs::path& target) {
  if (!target.has_parent_path()) return;
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) throw IoError("cannot create directory " + target.parent_path().string() + ": " + ec.message());
}

}  // namespace

bool injected_write_failure() {
  static const long fail_at = [] {
    const char* v = std::getenv("POSENC_FAIL_WRITE");
    return v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  static std::atomic<long> count{0};
  if (fail_at <= 0) return false;
  return ++count == fail_at;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  create_parent(target);
  const std::string tmp = path + kTemporaryInfix + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw write_error(path, errno);
  int err = write_all(fd, bytes.data(), bytes.size());
  // fsync before rename: after a crash the target is the old or the new file, never an empty one.
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw write_error(path, err);
  }
}

std::string read_file(const std::string& path, std::uintmax_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw IoError("cannot read " + path + ": " + reason(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    // A device (/dev/zero), pipe or directory never ends or is no file at all.
    throw IoError("cannot read " + path + ": " +
                  (S_ISDIR(st.st_mode) ? std::string("it is a directory") : std::string("not a regular file")));
  }
  const auto too_large = [&] {
    ::close(fd);
    return IoError("cannot read " + path + ": larger than the " + std::to_string(max_bytes >> 20) +
                   " MiB such a file may have");
  };
  if (static_cast<std::uintmax_t>(st.st_size) > max_bytes) throw too_large();
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IoError("cannot read " + path + ": " + reason(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) throw too_large();  // a file that grows while read (/proc, a log)
  }
  ::close(fd);
  return out;
}

std::string without_bom(const std::string& text) { return text.rfind("\xEF\xBB\xBF", 0) == 0 ? text.substr(3) : text; }

std::string read_text_file(const std::string& path, std::uintmax_t max_bytes) {
  const std::string text = without_bom(read_file(path, max_bytes));
  if (const std::string problem = utf8_problem(text); !problem.empty())
    throw IoError("cannot read " + path + ": not UTF-8 text: " + problem);
  return text;
}

AppendFile::AppendFile(std::string path) : path_(std::move(path)) {
  create_parent(fs::path(path_));
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw write_error(path_, errno);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::write_line(const std::string& line) {
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  const std::string text = line + "\n";
  const int err = write_all(fd_, text.data(), text.size());
  if (err == 0) return;
  // Cut a partial line back off so the file stays a list of whole lines.
  if (before >= 0 && ::ftruncate(fd_, before) != 0) {
    // the reader drops a cut-short last line anyway
  }
  throw write_error(path_, err);
}

int remove_stale_temporaries(const std::string& dir) {
  static const std::regex temporary(R"(.+\.posenc-tmp\.([0-9]+))");  // posenc's own, not a user's NAME.tmp.N
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::smatch m;
    if (!it->is_regular_file(ec) || !std::regex_match(name, m, temporary)) continue;
    // Only a temporary whose writer is gone: a live process (another tool, or
    // a posenc in a directory it does not lock) may still rename it into place.
    const long pid = std::strtol(m[1].str().c_str(), nullptr, 10);
    const bool writer_alive =
        pid > 0 && pid <= INT32_MAX && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (!writer_alive && fs::remove(it->path(), ec)) ++removed;
  }
  return removed;
}

std::string fnv1a_checksum(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string utf8_problem(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= n && !(len == 2 && c < 0xC2) && !(len == 4 && c > 0xF4);
    for (size_t k = 1; ok && k < len; ++k) ok = (s[i + k] & 0xC0) == 0x80;
    if (ok && len == 3) {  // no overlong forms, no UTF-16 surrogates
      const unsigned c1 = s[i + 1];
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && len == 4) {
      const unsigned c1 = s[i + 1];
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      return std::string("byte ") + hex + " at offset " + std::to_string(i) + " is not valid UTF-8";
    }
    i += len;
  }
  return "";
}

}  // namespace posenc
