# Run at build time (cmake -P): writes OUT, a .cpp that defines
# posenc::build_commit() from the git commit of SOURCE_DIR ("unknown" outside a
# git checkout), with "-dirty" when tracked files differ from it. The file is
# rewritten only when its text changes, so an unchanged tree rebuilds nothing.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit RESULT_VARIABLE failed ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes RESULT_VARIABLE failed ERROR_QUIET)
  if(failed)
    set(commit "${commit}-unknown-state")
  elseif(NOT changes STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "// Written by cmake/build_commit.cmake at build time; do not edit.
namespace posenc {
const char* build_commit() { return \"${commit}\"; }
}  // namespace posenc
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
