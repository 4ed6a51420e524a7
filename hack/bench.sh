#!/usr/bin/env bash
# make bench: installs qemu, Debian's kernel and the storage tools
# (hack/vm/setup.sh, cached), then runs test/benchvm: in the VM, raw HDD, raw
# SSD, ssdcache (through the real node plugin's CSI API), lvmcache and bcache
# side by side on the same disks, working sets of 25/50/75 % of the cache on
# cold caches, 6 runs each, then one more after every cache is restaged (ssdcache:
# NodeUnstage and NodeStage, its hot set kept) and one more after ssdcache-node
# is restarted; the 50 % set's caches are left up while the VM powers off and
# boots again, for one run after the reboot; plus cold writes and the
# application-load profile (a tree of files on ext4, read run after run).
# Writes _output/bench/report.json, report.md and convergence.svg
# (per-invocation reports under parts/).
# Extra arguments go to the bench (e.g. -runs 8, -cache-mib 512, -runtime 6s).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
hack/vm/setup.sh >/dev/null   # also installs fdisk, whose sfdisk the guest partitions with
exec go run ./test/benchvm "$@"
