#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The C++ sources follow .clang-format (setup installs clang-format).
if command -v clang-format >/dev/null; then scripts/format.sh --check; fi
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
