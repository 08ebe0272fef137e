#!/usr/bin/env bash
# Installs what posenc needs to build (Debian packages) and builds it.
# Idempotent: packages already present are not touched; the build is incremental.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian 12 (bookworm: LibTorch 1.13, CLI11 2.1, spdlog 1.10) and Debian 13
# (trixie: LibTorch 2.6, CLI11 2.4, spdlog 1.15) name these packages alike; a
# release that names one differently gets its own line here.
release=$(. /etc/os-release 2>/dev/null && echo "${ID:-}-${VERSION_ID:-}")
packages=(g++ cmake make ninja-build libtorch-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
          libgtest-dev libopenblas0-openmp python3-matplotlib python3-numpy
          libgloo-dev     # Gloo's headers, for multi-process training (libtorch-dev does not pull them in)
          python3-torch   # the PyTorch-eager side of `posenc bench` and its parity test
          fortunes        # /usr/share/games/fortunes/cookie: the default text of the charlm task
          clang-format)   # scripts/format.sh, which the test command runs with --check
case "$release" in
  debian-12 | debian-13) ;;
  *) echo "setup: $release is not a tested release (Debian 12 and 13 are); trying Debian's package names" >&2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

sudo=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ] && [ -z "$sudo" ]; then
    echo "setup: not root and no sudo; install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# OpenBLAS's OpenMP build for LibTorch's BLAS calls. On a fresh Debian 12 the
# install also pulls in libopenblas0-pthread, whose alternative outranks the
# OpenMP one (100 vs 95). In such a fresh root (2026-11-22), posenc bench's
# one-thread matrix-product peak was 17 GFLOP/s through it, and a training step
# took 2.7x as long as with the OpenMP build here.
multiarch=$(gcc -print-multiarch 2>/dev/null || true)
for lib in libblas.so.3 liblapack.so.3; do
  name="$lib-$multiarch" target="/usr/lib/$multiarch/openblas-openmp/$lib"
  [ -n "$multiarch" ] && [ -e "$target" ] || continue
  current=$(update-alternatives --query "$name" 2>/dev/null | awk '/^Value:/ {print $2}')
  if [ "$current" != "$target" ]; then
    echo "setup: selecting $target for $lib (was ${current:-unset})"
    $sudo update-alternatives --set "$name" "$target" >/dev/null
  fi
done

[ "${1:-}" = "--no-build" ] && exit 0

jobs="${POSENC_BUILD_JOBS:-$(nproc)}"
# Ninja, not make: make builds target by target, so while the precompiled
# header (about 55 s) or a link was being built, the other cores waited; Ninja
# schedules every file of every target as soon as what it needs is there. On 2
# cores (an AMD EPYC, 2026-12-07) the clean build took 350 s against 404 s with
# make. A build directory configured before keeps its generator
# (CMake refuses to switch one).
generator=()
[ -f build/CMakeCache.txt ] || generator=(-G Ninja)
# CI fails where a unit cannot use the precompiled header: GCC would compile it
# without, minutes slower, after a warning no one reads (CMakeLists.txt).
strict=()
[ -n "${CI:-}" ] && strict=(-DPOSENC_REQUIRE_PCH=ON)
build_start=$(date +%s)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${strict[@]}" >/dev/null
cmake --build build -j "$jobs"
echo "setup: configuring and building took $(($(date +%s) - build_start)) s"
