// Finding the Python side: a python3 that can import what a script needs, and
// the scripts/ folder (beside the binary's build folder, $POSENC_SCRIPTS, or
// the source tree this binary was built from).
#pragma once

#include <string>

namespace posenc {

/// A python3 that imports `modules` (e.g. "matplotlib, numpy"): $POSENC_PYTHON
/// alone when it is set, else Debian's /usr/bin/python3, then python3 on PATH;
/// "" if none does.
std::string find_python(const std::string& modules);

/// Throws ConfigError, saying why, when $POSENC_PYTHON is set but does not run
/// or cannot import `modules`; for commands to call before their work starts.
void check_posenc_python(const std::string& modules);

/// The path of scripts/<name>, or "" if it cannot be found.
std::string find_script(const std::string& name);

/// Shell-quotes one argument.
std::string shell_quote(const std::string& s);

}  // namespace posenc
