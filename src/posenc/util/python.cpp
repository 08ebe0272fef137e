#include "posenc/util/python.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "posenc/environment.h"
#include "posenc/errors.h"
#include "posenc/util/process.h"

namespace posenc {
namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

namespace {
bool imports(const std::string& python, const std::string& modules) {
  const std::string cmd = shell_quote(python) + " -c " + shell_quote("import " + modules) + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}
}  // namespace

std::string find_python(const std::string& modules) {
  // A python named in $POSENC_PYTHON is the only one tried: whoever set it gets
  // that interpreter or an error (check_posenc_python), never another one.
  if (const char* env = std::getenv("POSENC_PYTHON"); env != nullptr && *env != '\0')
    return imports(env, modules) ? env : "";
  for (const char* p : {"/usr/bin/python3", "python3"})  // Debian's first: python3-matplotlib and python3-torch
    if (imports(p, modules)) return p;
  return "";
}

void check_posenc_python(const std::string& modules) {
  const char* env = std::getenv("POSENC_PYTHON");
  if (env == nullptr || *env == '\0' || imports(env, modules)) return;
  const bool runs = std::system((shell_quote(env) + " -c pass >/dev/null 2>&1").c_str()) == 0;
  throw ConfigError(std::string("POSENC_PYTHON=") + env + ": " +
                    (runs ? "cannot import " + modules : std::string("does not run (no such python?)")) +
                    "; point it to a python3 that does, or unset it to use /usr/bin/python3 or python3 on PATH");
}

std::string find_script(const std::string& name) {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("POSENC_SCRIPTS")) candidates.push_back(fs::path(env) / name);
  candidates.push_back(fs::path(self_executable()).parent_path().parent_path() / "scripts" / name);
  candidates.push_back(fs::path(build_source_dir()) / "scripts" / name);
  for (const auto& p : candidates)
    if (fs::exists(p)) return p.string();
  return "";
}

}  // namespace posenc
