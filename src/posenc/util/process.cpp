#include "posenc/util/process.h"

#include <filesystem>
#include <stdexcept>

namespace posenc {

std::string self_executable() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find this executable (/proc/self/exe): " + ec.message());
  return p.string();
}

}  // namespace posenc
