# Guest half of hack/vm/smoke.sh: runs inside the VM as root (bash).
# Proves by-id links, LVM, a writethrough dm-cache with checksummed data, and
# measures raw emulated NVMe against the raw simulated HDD with fio.
set -euo pipefail
HDD=/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_SSDCACHE-HDD-0
SSD=/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_SSDCACHE-NVME-0
step() { echo "== $* (t=$(cut -d' ' -f1 /proc/uptime)s)"; }

step "stable device links"
ls -l /dev/disk/by-id/
test -b "$HDD" && test -b "$SSD"
echo "hdd rotational=$(cat /sys/block/$(basename "$(readlink -f "$HDD")")/queue/rotational)" \
     "ssd rotational=$(cat /sys/block/$(basename "$(readlink -f "$SSD")")/queue/rotational)"

step "raw device read speed (fio, O_DIRECT, read-only)"
fio_read() { # dev rw bs depth size -> KiB/s
  fio --name=m --filename="$1" --readonly --rw="$2" --bs="$3" --iodepth="$4" --ioengine=libaio \
      --direct=1 --size="$5" --runtime=8 --time_based --output-format=terse --terse-version=3 \
      | awk -F';' '{print $7}'
}
ssd_seq=$(fio_read "$SSD" read 1M 8 512M); hdd_seq=$(fio_read "$HDD" read 1M 8 512M)
ssd_rnd=$(fio_read "$SSD" randread 4k 1 1G); hdd_rnd=$(fio_read "$HDD" randread 4k 1 4G)
awk -v a="$ssd_seq" -v b="$hdd_seq" -v c="$ssd_rnd" -v d="$hdd_rnd" 'BEGIN {
  printf "SEQ1M Q8  read: nvme %8.1f MB/s  hdd %8.1f MB/s  nvme/hdd %6.2f\n", a*1.024/1000, b*1.024/1000, a/b
  printf "RND4K Q1  read: nvme %8.0f IOPS   hdd %8.0f IOPS   nvme/hdd %6.2f\n", c/4, d/4, c/d }'

step "LVM: a VG on each disk"
lvm version | head -3
lvm config --type current activation/udev_sync activation/udev_rules devices/use_devicesfile 2>/dev/null || true
wipefs -a -q "$HDD" "$SSD"
pvcreate -q "$HDD" "$SSD"
vgcreate -q smoke-hdd "$HDD"
vgcreate -q smoke-ssd "$SSD"
lvcreate -q -y -n origin -L 1G smoke-hdd
lvcreate -q -y -n cmeta -L 8M smoke-ssd
lvcreate -q -y -n cdata -L 256M smoke-ssd
lvs -o lv_name,vg_name,lv_size,devices
ls -l /dev/smoke-hdd/ /dev/smoke-ssd/

step "writethrough dm-cache over the LV pair"
dd if=/dev/zero of=/dev/smoke-ssd/cmeta bs=1M count=1 oflag=direct status=none
size=$(blockdev --getsz /dev/smoke-hdd/origin)
dmsetup create smoke-cached --table \
  "0 $size cache /dev/smoke-ssd/cmeta /dev/smoke-ssd/cdata /dev/smoke-hdd/origin 512 1 writethrough smq 0"
udevadm settle
test -b /dev/mapper/smoke-cached
head -c $((128 << 20)) /dev/urandom > /tmp/data
want=$(sha256sum < /tmp/data | cut -d' ' -f1)
dd if=/tmp/data of=/dev/mapper/smoke-cached bs=1M oflag=direct status=none
for pass in 1 2 3; do
  got=$(dd if=/dev/mapper/smoke-cached bs=1M count=128 iflag=direct status=none | sha256sum | cut -d' ' -f1)
  [ "$got" = "$want" ] || { echo "checksum mismatch through the cache on pass $pass"; exit 1; }
done
echo "read back through cache 3x: sha256 $want OK"
dmsetup status smoke-cached
dmsetup remove smoke-cached
got=$(dd if=/dev/smoke-hdd/origin bs=1M count=128 iflag=direct status=none | sha256sum | cut -d' ' -f1)
[ "$got" = "$want" ] || { echo "origin does not hold the data after detach (writethrough broken)"; exit 1; }
echo "origin alone after removing the cache: sha256 OK"

step "clean up"
vgremove -q -y smoke-hdd smoke-ssd
pvremove -q "$HDD" "$SSD"
dmsetup ls
step "smoke passed"
