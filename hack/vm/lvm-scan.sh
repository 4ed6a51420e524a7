#!/usr/bin/env bash
# Boots the test VM once and measures one `lvm vgs` on a node with many staged
# volumes, unrestricted and restricted to the pool devices (--devices, as
# ssdcache-node runs LVM), and shows a tenant-written PV label seen only
# unrestricted. Usage: hack/vm/lvm-scan.sh [work-dir]  (VOLUMES=64 RUNS=5)
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-$(mktemp -d /tmp/ssdcache-lvmscan.XXXXXX)}
hack/vm/setup.sh > /dev/null
script=$(mktemp)
trap 'rm -f "$script"' EXIT
{ echo "VOLUMES=${VOLUMES:-64} RUNS=${RUNS:-5}"; cat hack/vm/lvm-scan-guest.sh; } > "$script"
exec hack/vm/run.sh -work "$work" -timeout 20m -script "$script"
