#!/usr/bin/env bash
# Counts the GoogleTest cases of the last `ctest` run in a build directory.
#
# CTest runs one test per GoogleTest suite (cmake/gtest_suites.cmake), so its
# own "N tests passed" counts suites; this reads every suite's output from
# Testing/Temporary/LastTest.log and prints the cases passed, skipped (each
# named, with GoogleTest's reason) and failed.
#
# Usage: scripts/test-cases.sh [BUILD_DIR]   (default: build)
set -euo pipefail
log=${1:-build}/Testing/Temporary/LastTest.log
stopped=""
# A ctest stopped before its end (a time limit) leaves its log as
# LastTest.log.tmp, or with a random suffix after it (seen on a GPU machine on
# 2026-12-04: LastTest.log.tmp276e2), holding the suites it finished; the
# newest such file, if newer than LastTest.log, is the last run's.
partial=$(ls -t "$log".tmp* 2>/dev/null | head -1 || true)
if [ -n "$partial" ] && { [ ! -f "$log" ] || [ "$partial" -nt "$log" ]; }; then
  log=$partial
  stopped=" (ctest was stopped before its end: the suites it finished)"
fi
[ -f "$log" ] || { echo "test-cases: no $log (run ctest in that build directory first)" >&2; exit 1; }
# A case's result line ends with its time, "(12 ms)"; the summary's repeats do
# not. Skips are grouped by GoogleTest's reason, which it prints just before.
awk '
  function name_of(field) { sub(/,$/, "", field); return field }
  /^\[ RUN      \]/ { reason = "" }
  /: Skipped$/ { getline reason; next }
  /^\[       OK \] .* \([0-9]+ ms\)$/ { passed++ }
  /^\[  FAILED  \] .* \([0-9]+ ms\)$/ { failed++; failures = failures "  failed: " name_of($4) "\n" }
  /^\[  SKIPPED \] .* \([0-9]+ ms\)$/ {
    skipped++
    if (!(reason in count)) order[++reasons] = reason
    count[reason]++
    names[reason] = names[reason] (count[reason] > 1 ? ", " : "") name_of($4)
  }
  END {
    printf "test cases: %d passed, %d skipped, %d failed%s\n", passed, skipped, failed, stopped
    for (i = 1; i <= reasons; i++)
      printf "  %d skipped: %s: %s\n", count[order[i]], (order[i] == "" ? "no reason given" : order[i]), names[order[i]]
    printf "%s", failures
  }' stopped="$stopped" "$log"
