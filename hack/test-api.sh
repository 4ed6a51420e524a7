#!/usr/bin/env bash
# Runs the API tests (CRD schema and CEL validation, printer columns, ssdcache-controller)
# on a real kube-apiserver and etcd built by hack/envtest-assets.sh (cached; the first
# build takes about 7 minutes). Extra arguments go to `go test`, e.g. -run Capacity -v.
set -euo pipefail
cd "$(dirname "$0")/.."
assets=$(hack/envtest-assets.sh | tail -n 1)
export KUBEBUILDER_ASSETS=$assets
echo "test-api: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2
# -count=1: results depend on the API server binaries, which go test's cache does not see.
exec go test -count=1 -timeout 15m "$@" ./test/api/...
