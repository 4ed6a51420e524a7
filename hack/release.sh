#!/usr/bin/env bash
# hack/release.sh VERSION [OUT_DIR]: the artifacts the README installs, every
# one carrying VERSION, into OUT_DIR (default _output/release; `make release`):
#
#   ssdcache-node-V-linux-ARCH          the three binaries for amd64 and arm64:
#   ssdcache-controller-V-linux-ARCH    static, -trimpath, stamped with
#   ssdcache-bench-V-linux-ARCH         -X pkg/version.Version=V (each prints
#                                       "<name> V (...)" for --version)
#   ssdcache-image-V.oci.tar            the Dockerfile's image for linux/amd64 and
#                                       linux/arm64, docker.io/ssdcache/ssdcache:V,
#                                       as one OCI image-layout archive whose
#                                       image index lists both (test/e2e/images);
#                                       each platform holds the binaries above
#                                       of its architecture
#   ssdcache-V.tgz                      the Helm chart: version and appVersion V, so its
#                                       default image tag is V
#   index.yaml                          a Helm repository of that chart (`helm repo
#                                       index`): serve OUT_DIR, or copy both files
#                                       where your repository is served, and
#                                       `helm repo add ssdcache <url>`
#   ssdcache-crds-V.yaml                the chart's CRDs (charts/ssdcache/crds)
#   SHA256SUMS                          sha256sum of every file above
#
# A version without a prerelease part (0.2.0) needs its section in CHANGELOG.md.
#
# Environment:
#   HELM_REPO_URL    the URL the repository is served at, written into index.yaml
#                    (default: none, so the chart's URL is relative to the index)
#   HELM_REPO_INDEX  an index.yaml of former releases, merged into the new one
#   OCI_REGISTRY     e.g. ghcr.io/me: after the release is written, push
#                    the chart to oci://$OCI_REGISTRY/charts/ssdcache:V (helm push)
#                    and the image index with both platforms to
#                    $OCI_REGISTRY/ssdcache:V; install with
#                    helm install ssdcache oci://$OCI_REGISTRY/charts/ssdcache
#                    --version V --set image.repository=$OCI_REGISTRY/ssdcache.
#                    Unset: nothing is pushed (said so)
#   OCI_USERNAME, OCI_PASSWORD   credentials for OCI_REGISTRY (both pushes)
#   OCI_PLAIN_HTTP=1 the registry speaks HTTP without TLS (a local registry)
#
# VERSION is a semantic version without build metadata, MAJOR.MINOR.PATCH with
# an optional -PRERELEASE (0.1.0, 0.2.0-rc.1), as hack/version.sh makes it from
# git describe (what make release passes). A git-style leading "v" is
# dropped, so v0.1.0 and 0.1.0 give the same artifacts, all named and tagged
# 0.1.0 (Helm wants chart versions without it; image tags then match).
# "+build" metadata is refused: an image tag cannot hold "+".
#
# The image reuses test/e2e/images' Debian layers, one per architecture, cached
# under ${CACHE_DIR:-~/.cache/ssdcache}/e2e/images; building them the first
# time needs root and deb.debian.org (debootstrap and hack/image/rootfs.sh in
# a chroot: 35 s to 7 min for amd64 on 2 cores, idle to loaded; arm64's runs
# under qemu-user, which hack/image/emulate.sh installs with apt and registers
# with binfmt_misc, 12 min loaded). helm comes from hack/e2e-assets.sh.
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
# A release users install says what changed; a prerelease need not.
if [[ $version != *-* ]] && ! grep -q "^## \[$version\]" CHANGELOG.md; then
  die "CHANGELOG.md has no section \"## [$version]\": write what $version changes (move the [Unreleased] entries under it) before releasing it"
fi
mkdir -p "$(dirname "$out")"
stage=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$stage"' EXIT

start=$SECONDS
symbol=github.com/ssdcache/ssdcache/pkg/version.Version
binaries=(ssdcache-node ssdcache-controller ssdcache-bench)

# The same flags and environment as the Dockerfile's build stage and
# test/e2e/images, so the released binaries are byte for byte the image's.
arches=(amd64 arm64)
mkdir "$stage/bin"
for arch in "${arches[@]}"; do
  log "building ${binaries[*]} $version for linux/$arch"
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w -X $symbol=$version" \
    -o "$stage/bin/" "${binaries[@]/#/./cmd/}"
  for b in "${binaries[@]}"; do
    mv "$stage/bin/$b" "$stage/$b-$version-linux-$arch"
  done
done
rmdir "$stage/bin"

log "building the image docker.io/ssdcache/ssdcache:$version for ${arches[*]/#/linux/}"
mkdir "$stage/image"
# The Debian layers are built with debootstrap the first time, then cached.
command -v debootstrap >/dev/null || hack/e2e-assets.sh debootstrap
archive=$(go run ./test/e2e/images/cmd/mkimages -out "$stage/image" -repo . -arch "$(IFS=,; echo "${arches[*]}")" \
  -project "docker.io/ssdcache/ssdcache:$version" -version "$version" | cut -f2)
mv "$archive" "$stage/ssdcache-image-$version.oci.tar"
rm -rf "$stage/image"

helm=$(hack/e2e-assets.sh helm)
log "packaging the chart with $helm"
"$helm" lint charts/ssdcache >&2
"$helm" package charts/ssdcache --version "$version" --app-version "$version" -d "$stage" >&2
index_args=()
[ -z "${HELM_REPO_URL:-}" ] || index_args+=(--url "$HELM_REPO_URL")
if [ -n "${HELM_REPO_INDEX:-}" ]; then
  [ -f "$HELM_REPO_INDEX" ] || die "HELM_REPO_INDEX $HELM_REPO_INDEX is not a file"
  index_args+=(--merge "$(realpath "$HELM_REPO_INDEX")")
fi
"$helm" repo index "$stage" "${index_args[@]}" >&2

# One file, so one `kubectl apply -f` installs them all.
for f in charts/ssdcache/crds/*.yaml; do
  [ "$(head -n1 "$f")" = "---" ] || echo "---"
  cat "$f"
done >"$stage/ssdcache-crds-$version.yaml"

(cd "$stage" && sha256sum -- ssdcache-* index.yaml >SHA256SUMS)

chmod 0755 "$stage" # mktemp made it private
rm -rf "$out"
mv "$stage" "$out"
log "released $version into $out in $((SECONDS - start)) s:"
(cd "$out" && ls -l) >&2

# Pushed from the written release, so a failed push leaves it whole.
if [ -z "${OCI_REGISTRY:-}" ]; then
  log "OCI_REGISTRY unset: chart and image not pushed (make release OCI_REGISTRY=ghcr.io/me pushes them)"
  exit 0
fi
registry=${OCI_REGISTRY%/}
plain=()
[ "${OCI_PLAIN_HTTP:-}" != 1 ] || plain=(--plain-http)
if [ -n "${OCI_USERNAME:-}" ]; then
  "$helm" registry login "${registry%%/*}" "${plain[@]}" -u "$OCI_USERNAME" --password-stdin <<<"${OCI_PASSWORD:-}" >&2
fi
log "pushing the chart to oci://$registry/charts and the image to $registry/ssdcache:$version"
"$helm" push "$out/ssdcache-$version.tgz" "oci://$registry/charts" "${plain[@]}" >&2
go run ./test/release/cmd/ocipush -archive "$out/ssdcache-image-$version.oci.tar" -ref "$registry/ssdcache:$version" "${plain[@]/#--/-}" >&2
