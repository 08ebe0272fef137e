# Run at build time (cmake -P): writes OUT, a .cpp that defines
# posenc::build_commit() and posenc::build_source_dir() (SOURCE_DIR). The
# environment's POSENC_BUILD_COMMIT, where set, names the commit: whoever
# copied the tree knows its commit better than a .git that may have come along
# stale (a GPU machine's copy once carried the .git of an older commit). Else the git commit of SOURCE_DIR, with "-dirty" when tracked
# files differ from it; else "unknown". The file is rewritten only when its
# text changes, so an unchanged tree rebuilds nothing.
set(failed 1)
if("$ENV{POSENC_BUILD_COMMIT}" STREQUAL "")
  execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --show-toplevel --short=12 HEAD
                  OUTPUT_VARIABLE answer RESULT_VARIABLE failed ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
set(commit "")
if(NOT failed)
  # Only posenc's own checkout counts, not a repository a copied tree sits in.
  string(REPLACE "\n" ";" answer "${answer}")
  list(GET answer 0 top)
  list(GET answer 1 head)
  get_filename_component(top "${top}" REALPATH)
  get_filename_component(source "${SOURCE_DIR}" REALPATH)
  if(top STREQUAL source)
    set(commit "${head}")
  endif()
endif()
if(commit STREQUAL "")
  if(NOT "$ENV{POSENC_BUILD_COMMIT}" STREQUAL "")
    set(commit "$ENV{POSENC_BUILD_COMMIT}")
  else()
    set(commit "unknown")
  endif()
  # A C string literal: nothing that would end it or escape from it.
  string(REGEX REPLACE "[^A-Za-z0-9._+-]" "_" commit "${commit}")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes RESULT_VARIABLE failed ERROR_QUIET)
  if(failed)
    set(commit "${commit}-unknown-state")
  elseif(NOT changes STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
# The source directory as a C string literal: backslashes and quotes escaped.
string(REPLACE "\\" "\\\\" source_literal "${SOURCE_DIR}")
string(REPLACE "\"" "\\\"" source_literal "${source_literal}")
set(text "// Written by cmake/build_commit.cmake at build time; do not edit.
namespace posenc {
const char* build_commit() { return \"${commit}\"; }
const char* build_source_dir() { return \"${source_literal}\"; }
}  // namespace posenc
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
