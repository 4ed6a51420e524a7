#!/bin/sh
# Usage: hack/image/debian.sh SUITE OUT.tar [ARCH]
# The project image's Debian layer for the Debian architecture ARCH (amd64,
# the default, or arm64) without Docker, for test/e2e/images (the e2e's and
# the release's image): what debian:SUITE-slim is (debootstrap
# minbase with the slim dpkg excludes and apt-clean settings of Debian's
# images), then the Dockerfile's final stage
#   COPY hack/image/rootfs.sh /tmp/
#   RUN /tmp/rootfs.sh && rm /tmp/rootfs.sh
# in a chroot (test/e2e/images requires the Dockerfile to say just that).
# A foreign ARCH runs in the chroot under qemu-user, which hack/image/emulate.sh
# installs and registers with binfmt_misc (debootstrap's second stage and
# rootfs.sh; several times slower than native). Needs root. test/e2e/images
# names OUT after a hash of SUITE, ARCH (unless amd64), this script and
# rootfs.sh, and runs this only when OUT is missing; concurrent builders wait
# on OUT.lock. The full log goes to OUT with .log for .tar.
set -eu
suite=$1 out=$2 arch=${3:-amd64}
mirror=http://deb.debian.org/debian security=http://deb.debian.org/debian-security
rootfs_sh=$(dirname "$0")/rootfs.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
command -v debootstrap >/dev/null ||
  { echo "$0: needs debootstrap (hack/e2e-assets.sh debootstrap installs it)" >&2; exit 1; }
"$(dirname "$0")/emulate.sh" "$arch"
umask 022
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
[ -e "$out" ] && exit 0 # built by whoever held the lock
exec >"${out%.tar}.log" 2>&1
set -x
# Resolved, as /proc/mounts lists it, for cleanup.
dir=$(realpath "$(mktemp -d "$(dirname "$out")/.rootfs-build-XXXXXX")")
chmod 755 "$dir" # apt downloads as _apt, which must reach the tree

# Unmounts what is still mounted in the tree (a failed build may leave /proc
# mounted) before deleting it, so that rm never walks into a live /proc.
cleanup() {
  for m in $(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r); do
    umount "$m" || { echo "$0: $m is still mounted; left $dir in place" >&2; return; }
  done
  rm -rf "$dir" "$out.tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP # test/e2e/images sends TERM when cancelled

debootstrap --variant=minbase --arch="$arch" "$suite" "$dir" "$mirror"
cat >"$dir/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
EOF
# debian:*-slim's dpkg excludes (debuerreotype's slimify list) and
# docker-clean, which deletes downloaded packages after every apt run.
cat >"$dir/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
cat >"$dir/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
# Build only: no services started by package scripts, and the host's DNS
# for apt (resolv.conf may be a dangling symlink into the host).
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
chmod 755 "$dir/usr/sbin/policy-rc.d"
rm -f "$dir/etc/resolv.conf"
cat /etc/resolv.conf >"$dir/etc/resolv.conf"

mount -t proc proc "$dir/proc"
# Removes what debootstrap installed before the excludes and docker-clean.
chroot "$dir" /bin/sh -c 'set -e
apt-get clean
rm -rf /usr/share/groff/* /usr/share/info/* /usr/share/linda/* /usr/share/lintian/overrides/* /usr/share/locale/* /usr/share/man/*
find /usr/share/doc -mindepth 1 -not -type d -not -name copyright -delete
find /usr/share/doc -mindepth 1 -type d -empty -delete'
cp "$rootfs_sh" "$dir/tmp/"
chroot "$dir" /bin/sh -c '/tmp/rootfs.sh && rm /tmp/rootfs.sh'
umount "$dir/proc"

# The runtime provides resolv.conf and hostname to every container; the
# build logs (bootstrap, dpkg, alternatives) vary per run.
rm -f "$dir/usr/sbin/policy-rc.d" "$dir/etc/resolv.conf" "$dir/etc/hostname" "$dir"/var/log/*.log
: >"$dir/etc/resolv.conf"
: >"$dir/etc/hostname"

# Numeric owners, PAX (sub-second mtimes) without atime and ctime, name
# order; /dev /proc /run /sys /tmp empty, as the runtime mounts fresh ones
# (debootstrap's device nodes do not belong in an image). No xattrs: no
# package rootfs.sh installs sets any. Synced before the rename, so a crash
# never leaves a truncated layer under the cached name.
# shellcheck disable=SC2046 # top-level names have no spaces
tar --create --file="$out.tmp" --directory="$dir" --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  --numeric-owner --blocking-factor=1 --sort=name --anchored \
  --exclude='dev/*' --exclude='proc/*' --exclude='run/*' --exclude='sys/*' --exclude='tmp/*' \
  -- $(ls -A "$dir")
sync "$out.tmp"
mv "$out.tmp" "$out"
