#!/usr/bin/env bash
# hack/release.sh VERSION [OUT_DIR]: the artifacts the README installs, every
# one carrying VERSION, into OUT_DIR (default _output/release; `make release`):
#
#   ssdcache-node-V-linux-amd64         the three binaries: static, -trimpath,
#   ssdcache-controller-V-linux-amd64   stamped with -X pkg/version.Version=V
#   ssdcache-bench-V-linux-amd64        (each prints "<name> V (...)" for --version)
#   ssdcache-image-V.oci.tar            the Dockerfile's image, docker.io/ssdcache/ssdcache:V,
#                                       as an OCI image-layout archive (test/e2e/images)
#   ssdcache-V.tgz                      the Helm chart: version and appVersion V, so its
#                                       default image tag is V
#   ssdcache-crds-V.yaml                the chart's CRDs (charts/ssdcache/crds)
#   SHA256SUMS                          sha256sum of every file above
#
# VERSION is a semantic version without build metadata, MAJOR.MINOR.PATCH with
# an optional -PRERELEASE (0.1.0, 0.2.0-rc.1). A git-style leading "v" is
# dropped, so v0.1.0 and 0.1.0 give the same artifacts, all named and tagged
# 0.1.0 (Helm wants chart versions without it; image tags then match).
# "+build" metadata is refused: an image tag cannot hold "+".
#
# The image reuses test/e2e/images' Debian layer cached under
# ${CACHE_DIR:-~/.cache/ssdcache}/e2e/images; building it the first time needs
# root and deb.debian.org (minutes). helm comes from hack/e2e-assets.sh.
# OUT_DIR is replaced as a whole, and only if it is empty or a former release
# (it holds SHA256SUMS); the new release is assembled beside it first.
set -euo pipefail
log() { echo "release: $*" >&2; }
die() { log "$*"; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: hack/release.sh VERSION [OUT_DIR]"
raw=$1
# A relative OUT_DIR is taken from where the script is called; the default
# is _output/release in the repository.
out=$(realpath -ms -- "${2:-$(dirname "$0")/../_output/release}")
[ "$out" != / ] || die "OUT_DIR \"$2\" is not allowed: want a directory below /, which is replaced as a whole"
cd "$(dirname "$0")/.."

# Semantic Versioning 2.0: numbers without leading zeros; prerelease
# identifiers are numbers without leading zeros or alphanumerics with "-".
num='(0|[1-9][0-9]*)'
ident='(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)'
semver="^${num}\.${num}\.${num}(-${ident}(\.${ident})*)?$"
version=${raw#v}
if ! [[ $version =~ $semver ]] || [ ${#version} -gt 128 ]; then
  die "VERSION \"$raw\" is not allowed: want a semantic version MAJOR.MINOR.PATCH[-PRERELEASE] of at most 128 characters, \
e.g. 0.1.0, v0.1.0 (the v is dropped) or 0.2.0-rc.1; no leading zeros, no +build metadata (image tags cannot hold \"+\"). \
Without VERSION, make release takes \`git describe --tags --always --dirty\`, a bare commit hash when no tag precedes \
the commit: pass make release VERSION=x.y.z"
fi
[ "$version" = "$raw" ] || log "VERSION $raw: releasing as $version (leading v dropped)"

if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/SHA256SUMS" ]; then
  die "OUT_DIR $out holds files but no SHA256SUMS, so it is not a former release; refusing to replace it"
fi
mkdir -p "$(dirname "$out")"
stage=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$stage"' EXIT

start=$SECONDS
symbol=github.com/ssdcache/ssdcache/pkg/version.Version
binaries=(ssdcache-node ssdcache-controller ssdcache-bench)

# The same flags and environment as the Dockerfile's build stage and
# test/e2e/images, so the released binaries are byte for byte the image's.
log "building ${binaries[*]} $version"
mkdir "$stage/bin"
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "-s -w -X $symbol=$version" \
  -o "$stage/bin/" "${binaries[@]/#/./cmd/}"
for b in "${binaries[@]}"; do
  mv "$stage/bin/$b" "$stage/$b-$version-linux-amd64"
done
rmdir "$stage/bin"

log "building the image docker.io/ssdcache/ssdcache:$version"
mkdir "$stage/image"
# The Debian layer is built with debootstrap the first time, then cached.
command -v debootstrap >/dev/null || hack/e2e-assets.sh debootstrap
archive=$(go run ./test/e2e/images/cmd/mkimages -out "$stage/image" -repo . \
  -project "docker.io/ssdcache/ssdcache:$version" -version "$version" | cut -f2)
mv "$archive" "$stage/ssdcache-image-$version.oci.tar"
rm -rf "$stage/image"

helm=$(hack/e2e-assets.sh helm)
log "packaging the chart with $helm"
"$helm" lint charts/ssdcache >&2
"$helm" package charts/ssdcache --version "$version" --app-version "$version" -d "$stage" >&2

# One file, so one `kubectl apply -f` installs them all.
for f in charts/ssdcache/crds/*.yaml; do
  [ "$(head -n1 "$f")" = "---" ] || echo "---"
  cat "$f"
done >"$stage/ssdcache-crds-$version.yaml"

(cd "$stage" && sha256sum -- ssdcache-* >SHA256SUMS)

chmod 0755 "$stage" # mktemp made it private
rm -rf "$out"
mv "$stage" "$out"
log "released $version into $out in $((SECONDS - start)) s:"
(cd "$out" && ls -l) >&2
