#!/usr/bin/env bash
# Regenerates the API's deepcopy code and the CRD YAML in deploy/crd/ with a pinned
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
