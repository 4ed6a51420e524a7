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
STAGING=v0.${K8S_VERSION#v1.}   # staging modules are published as v0.<minor>.<patch>
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)

log() { echo "envtest-assets: $*" >&2; }

# Build in throwaway modules: ignore the project's go.work and vendoring.
export GOWORK=off GOFLAGS=-mod=mod
command -v go >/dev/null || { log "go is not on PATH (need Go >= 1.26)"; exit 1; }

mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Version checks capture the output first: `cmd | grep -q` under pipefail fails at
# random when grep exits before cmd has written everything (SIGPIPE).
version_of() { [ -x "$OUT/$1" ] && "$OUT/$1" "${@:2}" 2>/dev/null || true; }
etcd_ok() { [[ $(version_of etcd --version) == *"etcd Version: ${ETCD_VERSION#v}"$'\n'* ]]; }
apiserver_ok() { [[ $(version_of kube-apiserver --version) == "Kubernetes $K8S_VERSION" ]]; }
kubectl_ok() { [[ $(version_of kubectl version --client) == *"Client Version: $K8S_VERSION"$'\n'* ]]; }

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

# k8s.io/kubernetes requires its staging modules as v0.0.0 with replace directives to
# ./staging; a helper module replaces each with its published v0.<minor>.<patch>.
build_kube() {
  log "building $* $K8S_VERSION"
  mkdir -p "$WORK/k8s" && cd "$WORK/k8s"
  local modfile b
  modfile=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    printf 'module envtestassets/k8s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
    awk -v v="$STAGING" '$1 ~ /^k8s\.io\// && $2=="v0.0.0" {print "\t"$1" => "$1" "v}' "$modfile"
    echo ')'
  } >go.mod
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for b in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
    echo ')'
  } >tools.go
  go mod tidy >/dev/null 2>&1 || go mod tidy # rerun loudly on failure
  local vf="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
  vf+=" -X k8s.io/component-base/version.gitMinor=$MINOR -X k8s.io/component-base/version.gitTreeState=clean"
  vf+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1"
  vf+=" -X k8s.io/client-go/pkg/version.gitMinor=$MINOR"
  for b in "$@"; do
    go build -trimpath -ldflags="-s -w $vf" -o "$OUT/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$OUT/$b.tmp" "$OUT/$b"
  done
}

etcd_ok || build_etcd
need=()
apiserver_ok || need+=(kube-apiserver)
kubectl_ok || need+=(kubectl)
[ ${#need[@]} -eq 0 ] || build_kube "${need[@]}"
echo "$OUT"
