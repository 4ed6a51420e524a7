# Guest half of hack/vm/lvm-scan.sh: runs inside the VM as root (bash).
# Measures what one `lvm vgs` costs on a node with many staged volumes, with
# LVM free to scan every block device (as before) and restricted to the pool
# devices with --devices (as ssdcache-node runs it), and shows that a PV label
# a tenant writes into its volume is seen only without the restriction.
set -euo pipefail
HDD=/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_SSDCACHE-HDD-0
SSD=/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_SSDCACHE-NVME-0
VOLUMES=${VOLUMES:-64}
RUNS=${RUNS:-5}
POOL="$HDD,$SSD"

wipefs -a -q "$HDD" "$SSD"
lvm vgcreate -q --devices "$POOL" ssdcache-hdd "$HDD" >/dev/null
lvm vgcreate -q --devices "$POOL" ssdcache-nvme "$SSD" >/dev/null
# Volumes as the node stages them: an origin LV under a top-level dm device.
for i in $(seq 1 "$VOLUMES"); do
  lvm lvcreate -q -y --devices "$POOL" -n "vol-$i" -L 8M ssdcache-hdd >/dev/null
  dmsetup create "ssdcache-vol-$i" --table "0 16384 linear /dev/ssdcache-hdd/vol-$i 0"
done
# A tenant's Block volume: from its pod (a /dev of its own, where no
# ssdcache-hdd exists) it writes a PV label and a VG named like the pool.
mkdir -p /tmp/tenant-dev
mknod /tmp/tenant-dev/volume b $(dmsetup info -c --noheadings -o major ssdcache-vol-1) $(dmsetup info -c --noheadings -o minor ssdcache-vol-1)
cfg='devices { dir="/tmp/tenant-dev" scan=["/tmp/tenant-dev"] obtain_device_list_from_udev=0 }'
lvm pvcreate -q -y --config "$cfg" --devices /tmp/tenant-dev/volume /tmp/tenant-dev/volume >/dev/null
lvm vgcreate -q --config "$cfg" --devices /tmp/tenant-dev/volume ssdcache-hdd /tmp/tenant-dev/volume >/dev/null

median_ms() { # command... -> median wall time of RUNS runs, in ms
  local times=()
  for _ in $(seq 1 "$RUNS"); do
    local t0 t1
    t0=$(date +%s%N); "$@" >/dev/null 2>&1 || true; t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p"
}
echo "block devices on the node: $(ls /sys/class/block | wc -l) ($VOLUMES staged volumes)"
all=$(median_ms lvm vgs)
pool=$(median_ms lvm vgs --devices "$POOL")
echo "lvm vgs, every device:          median ${all} ms of $RUNS runs"
echo "lvm vgs --devices <pool>:       median ${pool} ms of $RUNS runs"
awk -v a="$all" -v b="$pool" 'BEGIN { if (b > 0) printf "restricted / unrestricted:      %.2f\n", b / a }'
echo "--- lvm vgs, every device (the tenant's VG appears):"
lvm vgs 2>&1 || true
echo "--- lvcreate in the pool, every device:"
lvm lvcreate -q -y -n probe-1 -L 8M ssdcache-hdd 2>&1 || true
echo "--- lvm vgs --devices <pool> (only the pools):"
lvm vgs --devices "$POOL" 2>&1
echo "--- lvcreate in the pool, --devices <pool>:"
lvm lvcreate -q -y --devices "$POOL" -n probe-2 -L 8M ssdcache-hdd 2>&1
