#!/usr/bin/env bash
# Regenerates the API's deepcopy code, the CRD YAML in deploy/crd/ (and its copy in the
# chart) and the ClusterRoles in deploy/rbac/ from RBAC markers, with a pinned
# controller-gen, so that the output does not depend on what is installed.
# `git diff --exit-code` after running it tells whether generated files are stale.
set -euo pipefail
CONTROLLER_TOOLS_VERSION=${CONTROLLER_TOOLS_VERSION:-v0.23.0}
cd "$(dirname "$0")/.."
controller_gen() { go run "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION" "$@"; }

controller_gen object:headerFile=hack/boilerplate.go.txt paths=./pkg/api/...
# Generated CRDs only: stale files of renamed types must not linger.
rm -f deploy/crd/ssdcache.io_*.yaml
controller_gen crd paths=./pkg/api/... output:crd:artifacts:config=deploy/crd

# ClusterRoles from the RBAC markers of the code that calls the API: the chart's
# RBAC must cover them (test/chart checks it).
rm -f deploy/rbac/controller/role.yaml deploy/rbac/node/role.yaml deploy/rbac/bench/role.yaml
controller_gen rbac:roleName=ssdcache-controller paths=./pkg/controller/... output:rbac:artifacts:config=deploy/rbac/controller
controller_gen rbac:roleName=ssdcache-node paths=./pkg/agent/... output:rbac:artifacts:config=deploy/rbac/node
controller_gen rbac:roleName=ssdcache-bench paths=./pkg/bench/reportcm/... output:rbac:artifacts:config=deploy/rbac/bench

# The chart ships the same CRDs (Helm installs crds/ before the templates).
rm -f charts/ssdcache/crds/*.yaml
cp deploy/crd/*.yaml charts/ssdcache/crds/
