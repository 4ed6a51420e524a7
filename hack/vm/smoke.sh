#!/usr/bin/env bash
# Boots the test VM once and proves the harness: by-id links for both disks,
# LVM on each, a writethrough dm-cache with checksummed data, dmsetup status,
# and the raw NVMe vs simulated HDD read-speed ratios. Runs the real VM
# (software emulation, ~1-2 minutes). Usage: hack/vm/smoke.sh [work-dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-$(mktemp -d /tmp/ssdcache-smoke.XXXXXX)}
hack/vm/setup.sh > /dev/null
start=$(date +%s%N)
rc=0
hack/vm/run.sh -work "$work" -script hack/vm/smoke-guest.sh || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf 'smoke: exit %d, wall %d.%03ds, work dir %s\n' "$rc" $((ms / 1000)) $((ms % 1000)) "$work" >&2
exit "$rc"
