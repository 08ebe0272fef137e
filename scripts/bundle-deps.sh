#!/usr/bin/env bash
# Bundles posenc's header-only and small build dependencies (CLI11, spdlog, fmt,
# nlohmann_json, GoogleTest) from Debian's packages into .gpu-deps/ in the project
# root, for a machine that has a CUDA LibTorch but no package mirror (an
# offline GPU node). Run it on a Debian machine with apt, then copy .gpu-deps/
# along with the tree; scripts/gpu-check.sh finds it there.
#
# A machine that can install these itself (conda, pip's cmake packages, the
# distribution's -dev packages) needs no bundle: CMake finds them with
# find_package first.
#
# Usage (project root, Debian 12 or 13): scripts/bundle-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu-deps
# Debian names the fmt and spdlog runtime packages by version: take the ones
# that libspdlog-dev and libfmt-dev depend on in this release.
runtime_of() { apt-cache depends "$1" 2>/dev/null | awk -v pat="$2" '/Depends:/ && $2 ~ pat {print $2; exit}'; }
if ! apt-cache show libspdlog-dev >/dev/null 2>&1; then
  echo "bundle-deps: apt knows no libspdlog-dev here; run 'apt-get update' first (as root)" >&2
  exit 1
fi
packages=(libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev googletest libgtest-dev)
spdlog_rt=$(runtime_of libspdlog-dev '^libspdlog[0-9]')
fmt_rt=$(runtime_of libfmt-dev '^libfmt[0-9]')
[ -n "$spdlog_rt" ] && packages+=("$spdlog_rt")
[ -n "$fmt_rt" ] && packages+=("$fmt_rt")

rm -rf "$out" && mkdir -p "$out/debs"
(cd "$out/debs" && apt-get download "${packages[@]}" >/dev/null)
for f in "$out"/debs/*.deb; do dpkg -x "$f" "$out"; done
rm -rf "$out/debs"
echo "bundle-deps: ${packages[*]} -> $out ($(du -sh "$out" | cut -f1))"
echo "bundle-deps: on the GPU machine: scripts/gpu-check.sh (it adds $out/usr to CMAKE_PREFIX_PATH)"
