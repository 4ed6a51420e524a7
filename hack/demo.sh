#!/usr/bin/env bash
# make demo: on a fresh Debian machine, installs qemu, Debian's kernel and the
# storage tools (hack/vm/setup.sh, cached), then runs test/demo (its package
# comment says what it shows); the full report goes to _output/demo/.
# Extra arguments go to the demo (e.g. -runs 8, -cache-mib 512).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
hack/vm/setup.sh >/dev/null   # also installs fdisk, whose sfdisk the guest partitions with
exec go run ./test/demo "$@"
