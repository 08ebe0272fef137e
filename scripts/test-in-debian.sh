#!/usr/bin/env bash
# Runs the README's test command (scripts/test.sh: install what is missing,
# build, run the tests) in a fresh minimal Debian root, as a new user's machine
# would be. CI uses it for the Debian 13 leg; run it by hand the same way.
#
# Usage (as root): scripts/test-in-debian.sh [SUITE] [-- CTEST_ARGS...]
#                  scripts/test-in-debian.sh [SUITE] --run 'COMMAND'
#   SUITE  a Debian suite debootstrap knows (default: trixie, Debian 13)
#   --run  instead of the tests: scripts/setup.sh, then COMMAND (bash), in the
#          project root there; its runs/ is this tree's runs/debian-SUITE/, so
#          what it writes there (e.g. `build/posenc bench --out runs/bench`) stays.
#
# The mirror is the first one in this machine's own apt sources. The minbase
# tarball is cached (POSENC_DEBIAN_CACHE, default /var/cache/posenc-debian) and
# so are the .debs the root downloads, so only the first run fetches them. The
# root is built anew each run from the tarball and removed afterwards; /proc and
# /dev are mounted for the run and unmounted on exit, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
suite=trixie
if [ $# -gt 0 ] && [ "$1" != "--" ] && [ "$1" != "--run" ]; then suite=$1; shift; fi
run_command=""
if [ "${1:-}" = "--run" ]; then
  [ $# -ge 2 ] || { echo "test-in-debian: --run needs a command" >&2; exit 2; }
  run_command=$2
  shift 2
fi
[ "${1:-}" = "--" ] && shift
[ "$(id -u)" -eq 0 ] || { echo "test-in-debian: must run as root (debootstrap, chroot, mount)" >&2; exit 1; }

say() { echo "test-in-debian[$suite]: $*" >&2; }

# The first deb mirror of this machine's apt configuration (deb822 or one-line format).
mirror_of_this_machine() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk '/^URIs:/ && !/security/ {print $2; exit}' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1 == "deb" && !/security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
}
mirror=$(mirror_of_this_machine)
[ -n "$mirror" ] || { echo "test-in-debian: no deb mirror found in /etc/apt/sources.list(.d)" >&2; exit 1; }

if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
fi

cache=${POSENC_DEBIAN_CACHE:-/var/cache/posenc-debian}
tarball="$cache/$suite-minbase.tgz"
debs="$cache/$suite-debs"
mkdir -p "$cache" "$debs/partial"
root=$(mktemp -d "/var/tmp/posenc-$suite.XXXXXX")
# mktemp makes it 0700: as the root of the tree, other users (munge, _apt) could
# then open nothing in it.
chmod 755 "$root"

cleanup() {
  local m
  for m in work/posenc/runs var/cache/apt/archives dev proc; do
    mountpoint -q "$root/$m" 2>/dev/null && { umount "$root/$m" 2>/dev/null || umount -l "$root/$m"; }
  done
  # Only delete when nothing is mounted below the root any more.
  if ! grep -q " $root/" /proc/mounts; then rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ ! -s "$tarball" ]; then
  say "making the minbase tarball $tarball (once)"
  debootstrap --variant=minbase --make-tarball="$tarball.tmp" "$suite" "$root.tb" "$mirror" >&2
  rm -rf "$root.tb"
  mv "$tarball.tmp" "$tarball"
fi
say "unpacking a fresh root in $root"
debootstrap --variant=minbase --unpack-tarball="$tarball" "$suite" "$root" "$mirror" >"$root.log" 2>&1 ||
  { tail -n 20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"

# The project as it is in this working tree (tracked and untracked, not ignored files).
mkdir -p "$root/work/posenc"
git -C "$repo" ls-files -z --cached --others --exclude-standard |
  (cd "$repo" && tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$root/work/posenc"

cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# The root is removed after the run: dpkg need not sync every file it unpacks.
mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/posenc-throwaway-root"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind "$debs" "$root/var/cache/apt/archives"
if [ -n "$run_command" ]; then
  mkdir -p "$repo/runs/debian-$suite" "$root/work/posenc/runs"
  mount --bind "$repo/runs/debian-$suite" "$root/work/posenc/runs"
fi

# The copied tree has no .git: the build inside learns the commit from here.
commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ "$commit" = unknown ] || git -C "$repo" diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
env_in_root=(/usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
             LANG=C.UTF-8 CI="${CI:-}" POSENC_BUILD_JOBS="${POSENC_BUILD_JOBS:-}" POSENC_BUILD_COMMIT="$commit")
if [ -n "$run_command" ]; then
  say "scripts/setup.sh, then: $run_command"
  chroot "$root" "${env_in_root[@]}" bash -c 'cd /work/posenc && scripts/setup.sh && bash -c "$1"' run "$run_command"
else
  say "running scripts/test.sh in the $suite root"
  chroot "$root" "${env_in_root[@]}" bash -c 'cd /work/posenc && bash scripts/test.sh "$@"' test-in-debian "$@"
fi
