#!/usr/bin/env bash
# Runs a bash script in the test VM and exits with its exit code:
#   hack/vm/run.sh -work DIR -script FILE     (or -c 'COMMAND')
# DIR keeps the disk images between runs; DIR/share is the guest's /vmwork,
# where host-built binaries (CGO_ENABLED=0) can be put. See test/vm/README.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${CACHE_DIR:-$HOME/.cache/ssdcache}
bin=$cache/bin/vmrun
mkdir -p "$cache/bin"
# go build is incremental: this is quick when nothing changed.
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$bin" ./test/vm/cmd/vmrun)
exec "$bin" "$@"
