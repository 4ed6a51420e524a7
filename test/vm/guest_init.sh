#!/bin/bash
# Stage 2 of the guest's boot, run as PID 1 after switch_root onto the overlay
# of the host root. It makes the guest look like a real node (udev, by-id
# links, device-mapper, LVM), runs the caller's script with its output in the
# shared work dir, and powers off. Written to /vmwork/.vm/init.sh by the harness.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
export LC_ALL=C HOME=/root TERM=dumb
V=/vmwork/.vm

# busybox's poweroff -f calls reboot(2) at once. A plain sysrq poweroff lets
# PID 1 run on while virtio goes away, and its pages mapped from the 9p root
# then fault (SIGBUS) and the kernel panics on init's death.
poweroff_now() { sync; /bin/busybox poweroff -f; echo o > /proc/sysrq-trigger; sleep 30; }
trap poweroff_now EXIT

mount -t tmpfs -o mode=755,size=256m tmpfs /run
mkdir -p /run/lock /run/udev /run/lvm /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
# What systemd would add to devtmpfs; bash process substitution needs /dev/fd.
ln -sf /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
mount -t tmpfs tmpfs /dev/shm
# The host's /tmp shows through the overlay; the guest gets its own.
mount -t tmpfs -o size=50% tmpfs /tmp
hostname ssdcache-vm
# A node has its loopback up: ssdcache-node serves /metrics on 127.0.0.1.
ip link set lo up
echo 1 > /proc/sys/kernel/sysrq

boot_log() { echo "vm-init: $*" >> $V/boot.log; }
: > $V/boot.log
boot_log "kernel $(uname -r) up after $(cut -d' ' -f1 /proc/uptime)s"

# One modprobe for all: each kmod start costs ~0.5 s under emulation.
modprobe -a nvme virtio_scsi sd_mod dm_mod dm_cache dm_cache_smq dm_era dm_delay dm_flakey \
  dm_thin_pool dm_snapshot loop ext4 xfs 2>> $V/boot.log || boot_log "modprobe failed"
boot_log "modules loaded after $(cut -d' ' -f1 /proc/uptime)s"

# The real udevd from the host root: it creates /dev/disk/by-id links, the
# /dev/mapper nodes and completes LVM's udev_sync cookies, as on a node.
/lib/systemd/systemd-udevd --daemon --resolve-names=never 2>> $V/boot.log || boot_log "udevd failed"
boot_log "udevd started after $(cut -d' ' -f1 /proc/uptime)s"
# Only block devices matter here; triggering everything makes udev modprobe
# every driver qemu's machine offers, which costs seconds under emulation.
udevadm trigger --action=add --subsystem-match=block
udevadm settle --timeout=60 || boot_log "udevadm settle timed out"
boot_log "devices settled after $(cut -d' ' -f1 /proc/uptime)s"

cd /vmwork
bash $V/script.sh > $V/stdout 2> $V/stderr < /dev/null
echo $? > $V/rc.tmp && mv $V/rc.tmp $V/rc
boot_log "script done after $(cut -d' ' -f1 /proc/uptime)s"
