// Registry entries of the built-in schemes, one function per scheme, each
// defined in the source file of its family. registry.cpp lists them.
#pragma once

#include "posenc/positional/registry.h"

namespace posenc {

// absolute.cpp: embedding-time schemes
SchemeInfo none_scheme_info();
SchemeInfo sinusoidal_scheme_info();
SchemeInfo learned_scheme_info();

// rotary.cpp
SchemeInfo rope_scheme_info();

}  // namespace posenc
