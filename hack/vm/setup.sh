#!/usr/bin/env bash
# Installs what the VM harness needs from Debian's packages (idempotent) and
# builds a small initramfs for the installed Debian kernel, cached under
#   ${CACHE_DIR:-$HOME/.cache/ssdcache}/vm/<kernel-version>/{vmlinuz,initrd.gz}
# The guest shares the host root read-only over 9p, so the initramfs only holds
# busybox and the modules needed to mount 9p and overlay; every other tool and
# module comes from the host root. Prints the cache directory on success.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/../lib/apt.sh"

PACKAGES=(qemu-system-x86 linux-image-amd64 lvm2 dmsetup thin-provisioning-tools
  e2fsprogs xfsprogs fio bcache-tools busybox-static udev cpio util-linux fdisk kmod gzip)
CACHE_ROOT=${CACHE_DIR:-$HOME/.cache/ssdcache}/vm
# Bump when the init below changes, so stale caches are rebuilt.
INITRD_FORMAT=1


kernel_version() {
  ls /lib/modules | while read -r k; do [ -e "/boot/vmlinuz-$k" ] && echo "$k"; done | sort -V | tail -1
}

build_initrd() {
  local k=$1 out=$2 root
  root=$(mktemp -d)
  trap "rm -rf '$root'" RETURN
  mkdir -p "$root"/{bin,dev,proc,sys,mods,mnt/host,mnt/rw,newroot}
  cp /bin/busybox "$root/bin/"
  for a in sh mount umount insmod mkdir cat echo switch_root poweroff sleep; do ln -s busybox "$root/bin/$a"; done
  for m in virtio_pci 9pnet_virtio 9p overlay; do modprobe -S "$k" --show-depends "$m"; done |
    awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r f; do
      cp "$f" "$root/mods/"; basename "$f" >> "$root/mods/order"; done
  cat > "$root/init" <<'EOS'
#!/bin/sh
# Stage 1: make the host root (read-only 9p) plus a tmpfs upper the guest's
# root, mount the shared work dir, then hand over to the harness's stage 2.
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod /mods/$m || echo "initrd: insmod $m failed"; done
fail() { echo "initrd: $*"; echo o > /proc/sysrq-trigger; sleep 10; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /mnt/host || fail "mount hostroot"
mount -t tmpfs -o size=75% tmpfs /mnt/rw; mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay overlay -o lowerdir=/mnt/host,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work /newroot || fail "mount overlay"
mkdir -p /newroot/vmwork
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 hostwork /newroot/vmwork || fail "mount hostwork"
# Fresh kernel filesystems: the host's /proc, /sys and /dev seen through 9p are not ours.
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys; mount -t devtmpfs dev /newroot/dev
[ -x /newroot/vmwork/.vm/init.sh ] || fail "/vmwork/.vm/init.sh missing"
exec switch_root /newroot /vmwork/.vm/init.sh
EOS
  chmod +x "$root/init"
  (cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > "$out.tmp") && mv "$out.tmp" "$out"
}

main() {
  apt_install setup "${PACKAGES[@]}"
  local k dir
  k=$(kernel_version)
  [ -n "$k" ] || { echo "setup: no kernel with modules under /lib/modules and /boot/vmlinuz-*" >&2; exit 1; }
  dir=$CACHE_ROOT/$k
  mkdir -p "$dir"
  if [ ! -s "$dir/initrd.gz" ] || [ "$(cat "$dir/format" 2>/dev/null)" != "$INITRD_FORMAT" ]; then
    echo "setup: building initramfs for $k in $dir" >&2
    build_initrd "$k" "$dir/initrd.gz"
    echo "$INITRD_FORMAT" > "$dir/format"
  fi
  ln -sf "/boot/vmlinuz-$k" "$dir/vmlinuz"
  echo "$dir"
}

main "$@"
