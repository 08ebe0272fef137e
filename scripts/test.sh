#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase prints its time: what makes CI long shows in its log.
phase_start=$(date +%s)
phase_took() {
  local now
  now=$(date +%s)
  echo "test: $1 took $((now - phase_start)) s"
  phase_start=$now
}
scripts/setup.sh
phase_took "set-up and build (scripts/setup.sh)"
# The C++ sources follow .clang-format (setup installs clang-format).
if command -v clang-format >/dev/null; then scripts/format.sh --check; fi
# A one-node Slurm cluster for the tests that run compare --slurm on a real one
# (SlurmCluster.*; they skip where there is none). Only as root, and in CI or
# when POSENC_TEST_SLURM=1 asks for it: it installs slurm-wlm and munge.
if [ "$(id -u)" -eq 0 ] && { [ -n "${CI:-}" ] || [ -n "${POSENC_TEST_SLURM:-}" ]; }; then
  POSENC_SLURM_DIR=$(mktemp -d /tmp/posenc-slurm.XXXXXX)
  export POSENC_SLURM_DIR
  slurm_local=$PWD/scripts/slurm-local.sh
  if "$slurm_local" start; then
    trap '"$slurm_local" stop; rm -rf "$POSENC_SLURM_DIR"' EXIT
    export SLURM_CONF=$POSENC_SLURM_DIR/slurm.conf
  else
    echo "test: the local Slurm cluster did not start; the SlurmCluster tests will skip" >&2
  fi
fi
phase_took "the format check and the local Slurm cluster"
# CTest runs one test per GoogleTest suite; test-cases.sh then counts the cases
# and names each skipped one with its reason (the Slurm ones among them).
rc=0
(cd build && ctest --output-on-failure -j "$(nproc)" "$@") || rc=$?
phase_took "ctest"
# The numerically sensitive suites again, on a second OpenBLAS kernel path and
# on ATen's portable kernels (docs/platforms.md, "Kernel paths"), and under three
# other random seeds: a check that holds only for a lucky draw fails on a
# machine that draws other numbers (docs/platforms.md, "Random draws").
# The two scripts run side by side, each printing its lines when both are done
# (and the kernel paths side by side among themselves): on 2 cores all the
# reruns took 100 s so, against 230 s before the seeds left out the cases they
# would only repeat (an AMD EPYC, 2026-12-07).
# Each in a process group of its own, which a stop (Ctrl-C, SIGTERM) ends whole.
kernel_log=$(mktemp) seeds_log=$(mktemp)
setsid scripts/test-kernel-paths.sh build >"$kernel_log" 2>&1 &
kernel_pid=$!
setsid scripts/test-seeds.sh build 1 2 3 >"$seeds_log" 2>&1 &
seeds_pid=$!
trap 'kill -TERM -- -"$kernel_pid" -"$seeds_pid" 2>/dev/null; rm -f "$kernel_log" "$seeds_log"; exit 130' INT TERM
wait "$kernel_pid" || rc=1
wait "$seeds_pid" || rc=1
trap - INT TERM
cat "$kernel_log" "$seeds_log"
phase_took "the reruns on other kernel paths and seeds"
rm -f "$kernel_log" "$seeds_log"
scripts/test-cases.sh build || true
exit $rc
