#!/usr/bin/env bash
# Builds a real kube-apiserver, etcd and kubectl for controller-runtime envtest from
# the Go module proxy (the usual setup-envtest download bucket is not reachable from
# our build machines). The binaries are cached per version under
#   ${CACHE_DIR:-$HOME/.cache/ssdcache}/envtest/<k8s-version>-<etcd-version>
# so a fresh clone on the same machine reuses them. The first build takes about
# 7 minutes on 2 cores. Prints the directory (use it as KUBEBUILDER_ASSETS).
#
# env: K8S_VERSION (default v1.37.2), ETCD_VERSION (default v3.6.16), CACHE_DIR
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CACHE_DIR=${CACHE_DIR:-$HOME/.cache/ssdcache}
OUT=$CACHE_DIR/envtest/$K8S_VERSION-$ETCD_VERSION

log() { echo "envtest-assets: $*" >&2; }

. "$(dirname "$0")/lib/gobuild.sh"

mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# etcd's server module has a main package, but its go.mod replaces its siblings with
# relative paths, so `go install ...@version` is refused; build it from a helper
# module that pins all sibling modules to the same version instead.
build_etcd() {
  log "building etcd $ETCD_VERSION"
  mkdir -p "$WORK/etcd" && cd "$WORK/etcd"
  printf 'module envtestassets/etcd\n\ngo 1.26.0\n' >go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
  local mods=() m
  for m in server api client/pkg client pkg; do mods+=("go.etcd.io/etcd/$m/v3@$ETCD_VERSION"); done
  go get "${mods[@]}" 2>"$WORK/etcd-get.log" || { cat "$WORK/etcd-get.log" >&2; exit 1; }
  go build -trimpath -ldflags='-s -w' -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$OUT/etcd.tmp" "$OUT/etcd"
}

# The directory is per version, and each build moves its binary in place last.
[ -x "$OUT/etcd" ] || build_etcd
kube_build "$OUT" "$K8S_VERSION" kube-apiserver kubectl
echo "$OUT"
