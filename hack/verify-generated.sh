#!/usr/bin/env bash
# Regenerates everything generated and fails if the result differs from what is
# committed, so stale deepcopy code or CRDs never land.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/generate.sh
if ! git diff --exit-code -- pkg/api deploy/crd deploy/rbac charts/ssdcache/crds || [ -n "$(git status --porcelain -- pkg/api deploy/crd deploy/rbac charts/ssdcache/crds)" ]; then
  echo "generated files are stale: run 'make generate' and commit the result" >&2
  git status --short -- pkg/api deploy/crd deploy/rbac charts/ssdcache/crds >&2
  exit 1
fi
echo "generated files are up to date"
