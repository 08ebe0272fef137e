// This process's own executable, to start children of the same build.
#pragma once

#include <string>

namespace posenc {

/// This executable's path (/proc/self/exe).
std::string self_executable();

}  // namespace posenc
