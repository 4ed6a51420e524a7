#!/usr/bin/env bash
# The kernel suite: installs qemu, Debian's kernel and the storage tools
# (hack/vm/setup.sh, cached), then runs test/kernel, which boots the VM and
# runs the real node plugin on dm-cache, LVM and filesystems inside.
# Extra arguments go to `go test`, e.g. -run TestPowerLoss. The output is
# also kept in ${CACHE_DIR}/logs/test-kernel.log (see hack/test-e2e.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/vm/setup.sh >/dev/null
export SSDCACHE_VM=1
LOG_DIR=${CACHE_DIR:-$HOME/.cache/ssdcache}/logs
mkdir -p "$LOG_DIR"
go test -count=1 -timeout 50m -v "$@" ./test/kernel/ 2>&1 | tee "$LOG_DIR/test-kernel.log"
