#!/usr/bin/env bash
# make bench: installs qemu, Debian's kernel and the storage tools
# (hack/vm/setup.sh, cached), then runs test/benchvm (its package comment and
# docs/bench.md say what it measures) into _output/bench/.
# Extra arguments go to the bench (e.g. -runs 8, -cache-mib 256, -runtime 4s).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
hack/vm/setup.sh >/dev/null   # also installs fdisk, whose sfdisk the guest partitions with
exec go run ./test/benchvm "$@"
