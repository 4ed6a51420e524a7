# One image for the three binaries. The node plugin needs the storage tools
# (lvm2, dmsetup, filesystem tools); the bench needs fio.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/ssdcache/ssdcache/pkg/version.Version=${VERSION}" -o /out/ ./cmd/...

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends lvm2 dmsetup thin-provisioning-tools e2fsprogs xfsprogs util-linux fio \
 && rm -rf /var/lib/apt/lists/* \
 # The node plugin runs LVM without udev inside its container.
 && sed -i -e 's/^\(\s*\)# udev_sync = 1/\1udev_sync = 0/' -e 's/^\(\s*\)# udev_rules = 1/\1udev_rules = 0/' /etc/lvm/lvm.conf
COPY --from=build /out/ssdcache-node /out/ssdcache-controller /out/ssdcache-bench /usr/local/bin/
# In a pod, dmsetup would wait forever for udev cookies that the host's udevd
# completes in the host's IPC namespace; libdevmapper makes the device nodes
# itself instead (as lvm.conf's udev_sync = 0 does for LVM above).
ENV DM_DISABLE_UDEV=1
# The controller and the bench run as this user; the node plugin's pod
# overrides it with root and privileges, which device-mapper needs.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ssdcache-controller"]
