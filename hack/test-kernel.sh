#!/usr/bin/env bash
# The kernel suite: installs qemu, Debian's kernel and the storage tools
# (hack/vm/setup.sh, cached), then runs test/kernel, which boots the VM and
# runs the real node plugin on dm-cache, LVM and filesystems inside.
# Extra arguments go to `go test`, e.g. -run TestPowerLoss.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/vm/setup.sh >/dev/null
export SSDCACHE_VM=1
exec go test -count=1 -timeout 50m -v "$@" ./test/kernel/
