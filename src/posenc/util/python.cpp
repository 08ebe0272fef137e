#include "posenc/util/python.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "posenc/util/process.h"

namespace posenc {
namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string find_python(const std::string& modules) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("POSENC_PYTHON")) candidates.push_back(env);
  candidates.push_back("/usr/bin/python3");  // Debian's, where python3-matplotlib and python3-torch install
  candidates.push_back("python3");
  for (const auto& p : candidates) {
    const std::string cmd = shell_quote(p) + " -c " + shell_quote("import " + modules) + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return p;
  }
  return "";
}

std::string find_script(const std::string& name) {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("POSENC_SCRIPTS")) candidates.push_back(fs::path(env) / name);
  candidates.push_back(fs::path(self_executable()).parent_path().parent_path() / "scripts" / name);
#ifdef POSENC_SOURCE_DIR
  candidates.push_back(fs::path(POSENC_SOURCE_DIR) / "scripts" / name);
#endif
  for (const auto& p : candidates)
    if (fs::exists(p)) return p.string();
  return "";
}

}  // namespace posenc
