#include "posenc/util/output_guard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "posenc/errors.h"
#include "posenc/util/io.h"

namespace posenc {
namespace fs = std::filesystem;

void check_not_system_location(const fs::path& dir, const std::string& flag) {
  std::error_code ec;
  const fs::path where = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  fs::path first, second;  // the components under the root: "dev" and "shm" of /dev/shm/run
  auto it = where.begin();
  if (it != where.end() && ++it != where.end()) first = *it;
  if (it != where.end() && ++it != where.end()) second = *it;
  const bool root = where == where.root_path();
  // /dev/shm is memory-backed scratch space, a fine place for outputs.
  const bool system = where.is_absolute() && ((first == "dev" && second != "shm") || first == "proc" || first == "sys");
  if (!ec && (root || system))
    throw ConfigError(flag + " " + dir.string() + ": outputs need a directory of their own, not " +
                      (root ? std::string("the filesystem's root") : "/" + first.string() + ", the kernel's") +
                      "; choose another");
}

void probe_writable(const fs::path& dir, const std::string& flag) {
  const fs::path probe = dir / (std::string(".posenc-probe") + kTemporaryInfix + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    throw ConfigError(flag + ": cannot write in " + dir.string() + ": " + std::strerror(err));
  }
  ::close(fd);
  std::error_code ec;
  fs::remove(probe, ec);
}

bool written_by(const std::string& path, const std::string& writer, bool (*also_ours)(const nlohmann::json& object)) {
  constexpr std::uintmax_t kLargestOutput = std::uintmax_t{64} << 20;  // outputs are small
  std::string text;
  try {
    text = read_file(path, kLargestOutput);
  } catch (const IoError&) {
    return false;
  }
  const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return false;
  return (parsed.contains(kWrittenBy) && parsed[kWrittenBy] == writer) || (also_ours && also_ours(parsed));
}

void check_output_target(const std::string& path, const std::string& flag, const std::string& writer,
                         bool (*also_ours)(const nlohmann::json& object)) {
  std::error_code ec;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const auto refuse = [&](const std::string& why) { throw ConfigError(flag + " " + path + ": " + why); };
  if (fs::is_directory(target, ec)) refuse("is a directory; give a file name");
  if (!fs::is_directory(dir, ec)) refuse("the directory " + dir.string() + " does not exist");
  check_not_system_location(dir, flag);
  probe_writable(dir, flag + " " + path);
  if (!fs::exists(fs::symlink_status(target, ec))) return;
  const std::string keep = "; posenc does not replace a file it did not write for this purpose (choose another " +
                           flag + ", or move that file away first)";
  if (!fs::is_regular_file(target, ec)) refuse("exists and is not a regular file" + keep);
  if (!written_by(path, writer, also_ours)) refuse("exists and was not written by " + writer + keep);
}

void check_output_directory(const std::string& dir, const OutputDirectory& spec) {
  std::error_code ec;
  const fs::path d(dir);
  const auto refuse = [&](const std::string& why) { throw ConfigError(spec.flag + " " + dir + ": " + why); };
  check_not_system_location(d, spec.flag);
  if (fs::exists(fs::symlink_status(d, ec)) && !fs::is_directory(d, ec))
    refuse("exists and is not a directory; give a directory for " + spec.writer + "'s outputs");
  if (!fs::is_directory(d, ec)) {
    // It will be created: its nearest existing parent must take it.
    fs::path parent = fs::absolute(d, ec).parent_path();
    while (!parent.empty() && !fs::exists(parent, ec) && parent != parent.root_path()) parent = parent.parent_path();
    if (!fs::is_directory(parent, ec)) refuse("no directory above it can hold it");
    probe_writable(parent, spec.flag + " " + dir);
    return;
  }
  for (const auto& name : spec.foreign)
    if (fs::exists(d / name))
      refuse("holds " + name + " of another posenc command's output; " + spec.writer +
             " needs a directory of its own (choose another " + spec.flag + ")");
  probe_writable(d, spec.flag);
  if (spec.ours && spec.ours(d)) return;
  for (const auto& name : spec.files)
    if (fs::exists(fs::symlink_status(d / name, ec)))
      refuse("holds a " + name + " that " + spec.writer +
             " did not write; posenc does not replace it (choose "
             "another " +
             spec.flag + ", or move that file away first)");
}

}  // namespace posenc
