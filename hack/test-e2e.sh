#!/usr/bin/env bash
# The end-to-end test: ssdcache installed with Helm on a real one-node
# Kubernetes (kubelet and containerd in the qemu guest, control plane on the
# host in a network namespace the test creates and deletes), with what the
# scripts below install and build, cached under ${CACHE_DIR:-~/.cache/ssdcache}.
# Extra arguments go to `go test`. SSDCACHE_E2E_KEEP=1 keeps the work dir of
# a failed run. The whole output is also kept in ${CACHE_DIR}/logs/test-e2e.log:
# CI's clone is gone when someone reads why a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "test-e2e: needs root (ip netns, tap device, apt-get)" >&2; exit 1; }
hack/vm/setup.sh >/dev/null
KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)
SSDCACHE_E2E_BIN=$(hack/e2e-assets.sh)
export KUBEBUILDER_ASSETS SSDCACHE_E2E_BIN SSDCACHE_E2E=1
LOG_DIR=${CACHE_DIR:-$HOME/.cache/ssdcache}/logs
mkdir -p "$LOG_DIR"
# One package at a time: the cluster needs both cores.
go test -p 1 -count=1 -timeout 60m -v "$@" ./test/e2e/... 2>&1 | tee "$LOG_DIR/test-e2e.log"
