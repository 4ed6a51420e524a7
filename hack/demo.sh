#!/usr/bin/env bash
# make demo: on a fresh Debian machine, installs qemu, Debian's kernel and the
# storage tools (hack/vm/setup.sh, cached), then runs test/demo: it boots the
# VM, starts the real ssdcache-node on LVM pools made from the disks' by-id
# partitions, provisions, stages and publishes a cached volume through CSI as
# external-provisioner and kubelet would, repeats a read test on it beside the
# raw SSD and raw HDD, and prints a table per run. The full report goes to
# _output/demo/. Extra arguments go to the demo (e.g. -runs 8, -cache-mib 512).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
hack/vm/setup.sh >/dev/null   # also installs fdisk, whose sfdisk the guest partitions with
exec go run ./test/demo "$@"
