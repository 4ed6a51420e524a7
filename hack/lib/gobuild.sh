# Shared by the asset scripts: build release binaries from the Go module proxy
# in throwaway modules (the project's go.work, vendoring and go.mod stay out).
# Source it; it checks for go and defines functions.

command -v go >/dev/null || { echo "$(basename "$0"): go is not on PATH (need Go >= 1.26)" >&2; exit 1; }
export GOWORK=off GOFLAGS=-mod=mod

# kube_build OUT K8S_VERSION CMD...: builds k8s.io/kubernetes/cmd/<CMD> into
# OUT, version-stamped, with Go's default cgo setting.
kube_build() {
  local out=$1 version=$2; shift 2
  local minor vf c cmds=()
  minor=$(echo "$version" | cut -d. -f2)
  vf="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1"
  vf+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  vf+=" -X k8s.io/client-go/pkg/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitMajor=1"
  vf+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for c in "$@"; do cmds+=("cmd/$c"); done
  BUILD_CGO=$(go env CGO_ENABLED) STAGING_VERSION=v0.${version#v1.} \
    module_build "$out" k8s.io/kubernetes "$version" "$vf" "" "${cmds[@]}"
}

# module_build OUT MODULE VERSION LDFLAGS TAGS PKG...: builds each PKG (a path
# under MODULE) into OUT/<basename>, without cgo unless BUILD_CGO=1, unless it
# is there: OUT is per version, and each build moves its binary in place last.
# The module's own replace directives are copied into the helper module, since
# Go ignores replaces of dependencies, but those to its own directories: of
# them, k8s.io/kubernetes's staging modules become their published version,
# STAGING_VERSION (v0.<minor>.<patch>).
module_build() {
  local out=$1 module=$2 version=$3 ldflags=$4 tags=$5; shift 5
  local work modfile p need=()
  for p in "$@"; do [ -x "$out/$(basename "$p")" ] || need+=("$p"); done
  [ ${#need[@]} -gt 0 ] || return 0
  set -- "${need[@]}"
  echo "$(basename "$0" .sh): building $module $version: $*" >&2
  mkdir -p "$out"
  work=$(mktemp -d)
  (
    trap 'rm -rf "$work"' EXIT
    cd "$work"
    modfile=$(go mod download -json "$module@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -n "$modfile" ] || { echo "module_build: $module@$version is not served by the module proxy" >&2; exit 1; }
    {
      printf 'module assets/build\n\ngo 1.26.0\n\nrequire %s %s\n\n' "$module" "$version"
      # single-line replaces and replace blocks alike
      awk '/^replace \(/{b=1; print; next} b&&/^\)/{b=0; print; next} b||/^replace /{print}' "$modfile" |
        sed -E "s#^(\s*)(\S+) => \./staging/src/.*#\1\2 => \2 ${STAGING_VERSION:-}#" | grep -v '=> \.' || true
    } >go.mod
    # A tools.go importing every PKG, so that `go mod tidy` keeps their dependencies.
    { printf '//go:build tools\n\npackage tools\n\nimport (\n'; printf '\t_ "%s"\n' "${@/#/$module/}"; echo ')'; } >tools.go
    go mod tidy >/dev/null 2>&1 || go mod tidy
    for p in "$@"; do
      CGO_ENABLED=${BUILD_CGO:-0} go build -trimpath -tags "$tags" -ldflags="-s -w $ldflags" -o "$out/$(basename "$p").tmp" "$module/$p"
      mv "$out/$(basename "$p").tmp" "$out/$(basename "$p")"
    done
  )
}
