#!/usr/bin/env bash
# Runs the numerically sensitive test suites again on other CPU kernel paths.
#
# OpenBLAS and ATen pick their kernels for the CPU they run on (AVX2, AVX-512),
# so a tolerance that holds on one machine's kernels can fail on a user's. This
# reruns the suites whose checks compare floating-point results (data parallel
# against one process, fused against explicit attention, golden values, the
# schemes' formulas, the CPU side of the CUDA checks, the PyTorch twin's loss)
# under:
#   1. another OpenBLAS core type: Haswell (AVX2) where OpenBLAS picks an
#      AVX-512 one, SkylakeX (AVX-512) where the CPU has AVX-512 and OpenBLAS
#      picks another, Sandybridge (AVX without FMA: what OpenBLAS runs on a
#      CPU without AVX2) where the CPU has AVX2 but no AVX-512 and OpenBLAS
#      picks Haswell or Zen; skipped, with the reason, on a CPU without AVX2;
#   2. ATen's portable kernels (ATEN_CPU_CAPABILITY=default).
# The paths run side by side. Each prints one line; a failing path prints its
# failures and the run exits 1.
#
# Usage: scripts/test-kernel-paths.sh [BUILD_DIR]   (default: build)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tests=$build/posenc_tests
[ -x "$tests" ] || { echo "kernel paths: no $tests (build first)" >&2; exit 1; }

# The suites that compare floating-point results, and the function that reruns them.
source scripts/numeric-suites.sh
check_numeric_patterns "$tests" || exit 1

# The core type the suite runs here (OpenBLAS prints "Core: NAME" for each choice
# when asked to be verbose: its own, then the one posenc switches it to where
# OpenBLAS does not know the CPU and picked kernels narrower than it runs).
cores=$(OPENBLAS_VERBOSE=2 "$tests" --gtest_filter=NoSuchTest 2>&1 | sed -n 's/^Core: //p')
picked=$(tail -1 <<<"$cores")
own=$(head -1 <<<"$cores")
[ "$own" != "$picked" ] && echo "kernel paths: OpenBLAS picks $own on this CPU; posenc runs its $picked kernels"
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }

paths=()   # "NAME|VAR=VALUE"
case "$picked" in
  SkylakeX | Cooperlake | SapphireRapids)
    has avx2 && paths+=("OpenBLAS Haswell kernels (the suite runs $picked here)|OPENBLAS_CORETYPE=Haswell") ;;
  *)
    if has avx512f; then
      paths+=("OpenBLAS SkylakeX kernels (the suite runs ${picked:-an unknown core} here)|OPENBLAS_CORETYPE=SkylakeX")
    elif has avx2 && [ "$picked" != Haswell ] && [ "$picked" != Zen ]; then
      paths+=("OpenBLAS Haswell kernels (the suite runs ${picked:-an unknown core} here)|OPENBLAS_CORETYPE=Haswell")
    elif has avx2; then
      # No wider kernels to try: the narrower AVX ones (no FMA, so other
      # rounding) that OpenBLAS runs on a CPU without AVX2.
      paths+=("OpenBLAS Sandybridge kernels (the suite runs $picked here)|OPENBLAS_CORETYPE=Sandybridge")
    else
      echo "kernel paths: skipped another OpenBLAS core type: this CPU has no AVX2, and OpenBLAS" \
        "already picks ${picked:-its own}"
    fi ;;
esac
paths+=("ATen's portable kernels|ATEN_CPU_CAPABILITY=default")

# The paths run side by side (background jobs of this script, so in its process
# group: a Ctrl-C or a group's SIGTERM ends them too), each printing its lines
# once all are done, in order.
logs=() pids=()
for entry in "${paths[@]}"; do
  name=${entry%%|*} setting=${entry#*|}
  logs+=("$(mktemp)")
  rerun_numeric_suites "$tests" "kernel paths:" "$name ($setting)" "$setting" >"${logs[-1]}" 2>&1 &
  pids+=($!)
done
trap 'rm -f "${logs[@]}"' EXIT
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
done
cat "${logs[@]}"
exit $failed
