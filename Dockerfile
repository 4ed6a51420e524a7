# One image for the three binaries, on the storage tools hack/image/rootfs.sh
# installs.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/ssdcache/ssdcache/pkg/version.Version=${VERSION}" -o /out/ ./cmd/...

FROM debian:bookworm-slim
# The packages and settings; test/e2e/images runs the same script.
COPY hack/image/rootfs.sh /tmp/
RUN /tmp/rootfs.sh && rm /tmp/rootfs.sh
COPY --from=build /out/ssdcache-node /out/ssdcache-controller /out/ssdcache-bench /usr/local/bin/
# In a pod, dmsetup would wait forever for udev cookies that the host's udevd
# completes in the host's IPC namespace; libdevmapper makes the device nodes
# itself instead (as udev_sync = 0 in lvm.conf, set by rootfs.sh, does for LVM).
ENV DM_DISABLE_UDEV=1
# The controller and the bench run as this user; the node plugin's pod
# overrides it with root and privileges, which device-mapper needs.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ssdcache-controller"]
