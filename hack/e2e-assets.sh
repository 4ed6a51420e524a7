#!/usr/bin/env bash
# Everything the end-to-end cluster needs beyond the API test's apiserver, etcd
# and kubectl (hack/envtest-assets.sh): Debian's runc, CNI plugins, iptables,
# conntrack and debootstrap; kubelet, kube-controller-manager, kube-scheduler
# and kube-proxy, containerd v2 with its shim and ctr, helm and csi-provisioner,
# all built from the Go module proxy. Builds are cached per version under
#   ${CACHE_DIR:-$HOME/.cache/ssdcache}/e2e/<name>-<version>/
# (about 15 minutes on 2 cores the first time) and linked into
#   ${CACHE_DIR}/e2e/bin/, which is printed on success.
#
# `hack/e2e-assets.sh helm` builds (or finds) helm alone and prints its path,
# for hack/release.sh, which needs nothing else.
#
# env: K8S_VERSION (v1.37.2), CONTAINERD_VERSION (v2.4.2), HELM_VERSION (v3.22.0),
#      CACHE_DIR. csi-provisioner's version is the chart's sidecar tag.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/gobuild.sh
. hack/lib/apt.sh

K8S_VERSION=${K8S_VERSION:-v1.37.2}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
# The chart pins the sidecar; the e2e must run the version users get.
PROVISIONER_VERSION=$(awk '/^  provisioner:/{p=1} p && /tag:/{print $2; exit}' charts/ssdcache/values.yaml)
CACHE_DIR=${CACHE_DIR:-$HOME/.cache/ssdcache}
E2E=$CACHE_DIR/e2e
PACKAGES=(runc containernetworking-plugins iptables conntrack debootstrap)

log() { echo "e2e-assets: $*" >&2; }
[ -n "$PROVISIONER_VERSION" ] || { log "no csi-provisioner tag in charts/ssdcache/values.yaml"; exit 1; }

build_helm() {
  module_build "$E2E/helm-$HELM_VERSION" helm.sh/helm/v3 "$HELM_VERSION" \
    "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "" cmd/helm
}

build_all() {
  kube_build "$E2E/k8s-$K8S_VERSION" "$K8S_VERSION" kubelet kube-controller-manager kube-scheduler kube-proxy
  local m=github.com/containerd/containerd/v2
  module_build "$E2E/containerd-$CONTAINERD_VERSION" $m "$CONTAINERD_VERSION" \
    "-X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Revision=modproxy" \
    "no_btrfs no_devmapper no_zfs no_aufs" cmd/containerd cmd/containerd-shim-runc-v2 cmd/ctr
  build_helm
  module_build "$E2E/csi-provisioner-$PROVISIONER_VERSION" github.com/kubernetes-csi/external-provisioner/v5 \
    "$PROVISIONER_VERSION" "-X main.version=$PROVISIONER_VERSION" "" cmd/csi-provisioner
}

link_bin() {
  local bin=$E2E/bin f
  rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
  for f in "$E2E/k8s-$K8S_VERSION"/* "$E2E/containerd-$CONTAINERD_VERSION"/* \
    "$E2E/helm-$HELM_VERSION"/helm "$E2E/csi-provisioner-$PROVISIONER_VERSION"/csi-provisioner; do
    ln -s "$f" "$bin.tmp/$(basename "$f")"
  done
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
  echo "$bin"
}

case "${1:-}" in
  "") apt_install e2e-assets "${PACKAGES[@]}"; build_all; link_bin ;;
  helm) build_helm; echo "$E2E/helm-$HELM_VERSION/helm" ;;
  debootstrap) apt_install e2e-assets debootstrap ;; # the image's Debian layer, for make release
  *) log "unknown argument \"$1\"; want none (everything), helm or debootstrap"; exit 2 ;;
esac
