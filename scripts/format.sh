#!/usr/bin/env bash
# Formats every C++ file of posenc with clang-format and the project's
# .clang-format, or with --check only reports the files that differ (exit 1).
# Usage: scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files -- 'include/*.h' 'src/*.h' 'src/*.cpp' 'tests/*.h' 'tests/*.cpp' 2>/dev/null ||
                     find include src tests -name '*.h' -o -name '*.cpp')
# clang-format's output differs between major versions: the tree is kept in the
# form that the version named in .clang-format writes, and --check with another
# version says so and checks nothing.
pinned=$(sed -n 's/^# Formatted with clang-format \([0-9]*\).*/\1/p' .clang-format)
have=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "${1:-}" = "--check" ]; then
  if [ -n "$pinned" ] && [ "$have" != "$pinned" ]; then
    echo "format: clang-format $have is not $pinned, the version that .clang-format pins; not checked here"
    exit 0
  fi
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} file(s) differ from .clang-format ($(clang-format --version | head -1)): ${bad[*]}" >&2
    echo "format: run scripts/format.sh to fix them" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files match .clang-format"
else
  clang-format -i "${files[@]}"
fi
