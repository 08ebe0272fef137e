#!/usr/bin/env bash
# The test suite on a build with AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Builds in build-sanitize/ with -DPOSENC_SANITIZE=ON (CMakeLists.txt) and runs
# CTest there. Every posenc process the tests start (the test binary, and each
# `posenc` command the CLI tests run) is instrumented: a read or write out of
# bounds, a use after free or after scope, a leak at exit, or undefined
# behaviour (signed overflow, a bad shift, cast or enum value, a null or
# misaligned access) in posenc's own code stops that process with a report.
# AddressSanitizer and LeakSanitizer write their reports to files (so that one
# from a process whose output nobody reads, such as a grid's training run, is
# still seen); UndefinedBehaviorSanitizer, which cannot, writes to the
# process's output, which CTest's log keeps and the CLI tests check. Either
# way the process exits with 86, which no test expects. The script prints the
# reports it finds and fails if there is any. LibTorch's own libraries are not
# instrumented.
#
# Not part of the README's test command: the instrumented build takes about
# 13 minutes on 2 cores, and the suite about 9 (docs/platforms.md, "Sanitizers").
#
# Usage: scripts/test-sanitizers.sh [CTEST ARGS...]    e.g. -R 'Golden|Config'
set -uo pipefail
cd "$(dirname "$0")/.."
build=build-sanitize
scripts/setup.sh --no-build || exit 1
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPOSENC_SANITIZE=ON >/dev/null || exit 1
cmake --build "$build" -j "${POSENC_BUILD_JOBS:-$(nproc)}" || exit 1

logs=$(mktemp -d /tmp/posenc-sanitize.XXXXXX)
export ASAN_OPTIONS="log_path=$logs/asan:exitcode=86:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:exitcode=86"
start=$(date +%s)
rc=0
(cd "$build" && ctest --output-on-failure -j "$(nproc)" "$@") || rc=$?
took=$(($(date +%s) - start))

# What the sanitizers said: ASan's files, and UBSan's lines in CTest's log.
markers='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:'
ubsan=$(grep -E "$markers" "$build/Testing/Temporary/LastTest.log" 2>/dev/null | sort | uniq -c)
reports=("$logs"/*)
if [ -e "${reports[0]}" ] || [ -n "$ubsan" ]; then
  echo "sanitizers: reports found (ASan's in $logs, one file per process that met one):"
  for f in "${reports[@]}"; do
    [ -e "$f" ] || continue
    echo "--- $f"
    grep -E "$markers|SUMMARY:|^    #[0-9]+ .*(/src/|/include/posenc/|/tests/)" "$f" | head -20
  done
  [ -n "$ubsan" ] && echo "--- in $build/Testing/Temporary/LastTest.log:" && echo "$ubsan" | head -40
  rc=1
else
  rmdir "$logs"
  echo "sanitizers: no report from any process (CTest exit $rc, ${took} s)"
fi
scripts/test-cases.sh "$build" || true
exit $rc
