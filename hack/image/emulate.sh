#!/usr/bin/env bash
# Usage: hack/image/emulate.sh ARCH
# Lets this machine run Linux binaries of the Debian architecture ARCH (arm64,
# amd64), for hack/image/debian.sh's foreign Debian layer and the release
# test: installs Debian's qemu-user-static if missing and registers its
# qemu-<cpu> interpreter with binfmt_misc, flag F (the kernel opens the
# interpreter at registration, so a chroot needs no copy of it). Does nothing
# for the host's own architecture; a registration already in place is kept.
# Needs root the first time; says on stderr what it registered.
set -euo pipefail
. "$(dirname "$0")/../lib/apt.sh"
log() { echo "emulate.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[ $# -eq 1 ] || die "usage: hack/image/emulate.sh ARCH"
arch=$1
[ "$arch" != "$(dpkg --print-architecture)" ] || exit 0
case $arch in
  amd64) cpu=x86_64 ;;
  arm64) cpu=aarch64 ;;
  *) die "ARCH \"$arch\" is not supported: want amd64 or arm64" ;;
esac

binfmt=/proc/sys/fs/binfmt_misc
entry=$binfmt/qemu-$cpu
# binfmt.d's line, as systemd-binfmt would load it; the package ships it.
conf=/usr/lib/binfmt.d/qemu-$cpu.conf

registered() {
  [ -f "$entry" ] && head -n1 "$entry" | grep -qx enabled && grep -q '^flags: .*F' "$entry"
}
[ -d "$binfmt" ] && registered && exit 0

# Debian 12's qemu-user-static; in Debian 13 the same name pulls in the
# static qemu-user and its binfmt.d files.
apt_install emulate.sh qemu-user-static
[ -f "$conf" ] || die "$conf is missing after installing qemu-user-static; cannot register the $cpu interpreter"
[ "$(id -u)" -eq 0 ] || die "needs root to register $conf with binfmt_misc"
if [ ! -e "$binfmt/register" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt" ||
    die "cannot mount binfmt_misc at $binfmt (\`mount -t binfmt_misc binfmt_misc $binfmt\` failed; a container without the privilege to mount it cannot run $arch binaries): the $arch image layer cannot be built here"
fi
registered && exit 0
# An entry without F (binfmt-support's default) would need the interpreter
# inside every chroot: replace it with the package's own.
if [ -f "$entry" ]; then
  log "replacing $entry (flags $(sed -n 's/^flags: //p' "$entry"), want F) with $conf"
  echo -1 >"$entry"
fi
grep -v '^#' "$conf" >"$binfmt/register" || die "registering $conf with $binfmt/register failed"
registered || die "$entry is not enabled with flag F after registering $conf"
log "registered $(sed -n 's/^interpreter //p' "$entry") for $arch binaries (binfmt_misc, flags $(sed -n 's/^flags: //p' "$entry"))"
