#!/usr/bin/env bash
# Runs the API tests (CRD schema and CEL validation, printer columns, ssdcache-controller
# in-process and as its real binary under the RBAC of its kubebuilder markers) and the
# chart tests (every rendered object applied with server-side dry run, the chart's RBAC
# checked with SubjectAccessReview, the flags it passes checked against the binaries) on a
# real kube-apiserver and etcd built by hack/envtest-assets.sh (cached; the first build
# takes about 7 minutes), and the docs tests (the README's and docs' commands run as
# written with kubectl and helm against such a server). Extra arguments go to `go test`,
# e.g. -run Capacity -v.
set -euo pipefail
cd "$(dirname "$0")/.."

assets=$(hack/envtest-assets.sh | tail -n 1)
export KUBEBUILDER_ASSETS=$assets
echo "test-api: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2
# The docs' commands need helm (built once, cached) and jq.
SSDCACHE_HELM=$(hack/e2e-assets.sh helm | tail -n 1)
export SSDCACHE_HELM
. hack/lib/apt.sh
apt_install test-api jq

# The controller's ClusterRole from its RBAC markers (hack/generate.sh; make test's
# verify-generated fails first if it is stale): the binary test runs ssdcache-controller
# with exactly these permissions.
export SSDCACHE_CONTROLLER_ROLE=$PWD/deploy/rbac/controller/role.yaml

# -count=1: results depend on the API server binaries, which go test's cache does not see.
go test -count=1 -timeout 15m "$@" ./test/api/... ./test/chart/... ./test/docs/...
