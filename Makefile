# ssdcache. `make test` runs everything CI runs; `make demo` shows a cache on a real kernel.
# Slow things (kube-apiserver/etcd, the VM's initramfs) are cached under $(CACHE_DIR).
SHELL := /usr/bin/env bash
GO ?= go
CACHE_DIR ?= $(HOME)/.cache/ssdcache
# One version for binaries, image tag and chart: git describe made semantic
# (v0.2.0 -> 0.2.0, a bare hash abc1234 -> 0.0.0-gabc1234); see hack/version.sh.
VERSION ?= $(shell hack/version.sh)
IMAGE ?= ssdcache/ssdcache:$(VERSION)
export CACHE_DIR

.PHONY: all build vet generate manifests verify-generated test test-unit test-release test-api test-kernel test-e2e demo bench bench-seed bench-scattered bench-api stress stress-connect image release

all: build

## build: the three binaries, static, into bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X github.com/ssdcache/ssdcache/pkg/version.Version=$(VERSION)" -o bin/ ./cmd/...

## vet: go vet and gofmt
vet:
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

## generate / manifests: deepcopy code and CRDs from the API types
generate manifests:
	hack/generate.sh

## verify-generated: fail when generated files are stale
verify-generated:
	hack/verify-generated.sh

## test-unit: parsers, planners, CSI handlers with fakes, in-process csi-sanity (no root, VM or API server)
test-unit:
	$(GO) test -short -count=1 ./...

## test-release: hack/release.sh into a temp dir, then every artifact checked for the version (image for amd64 and arm64 from the cached Debian layers; arm64's lvm and ssdcache-node run under qemu-user)
test-release:
	SSDCACHE_RELEASE=1 $(GO) test -count=1 -timeout 45m ./test/release/

## test-api: CRD validation and controllers on a real kube-apiserver and etcd; the docs' commands as written (test/docs)
test-api:
	hack/test-api.sh

## test-kernel: the node plugin on real dm-cache, LVM and filesystems in a qemu VM
test-kernel:
	hack/test-kernel.sh

## test-e2e: helm install on a real one-node cluster (kubelet in the VM), StorageClass, volume expansion, helm upgrade, bench Job, CacheBinding, restart, metrics, uninstall
test-e2e:
	hack/test-e2e.sh

## test: everything CI runs
test: vet verify-generated test-unit test-release test-api test-kernel test-e2e

## demo: boot the VM, provision and stage a cached volume through CSI, watch reads converge, restage it and read warm at once
demo:
	hack/demo.sh

## bench: raw HDD, raw SSD, ssdcache, lvmcache and bcache side by side in the VM: convergence, restage, plugin restart, reboot, application load
bench:
	hack/bench.sh

## bench-seed: StoreMI's review at real sizes: SEQ1M Q8T1, 10 whole passes over 1, 4 and 16 GiB working sets on a 32 GiB cache over a 4 TiB volume (sparse images), raw HDD/SSD, lvmcache and bcache beside it (about 2 h; needs about 52 GiB free)
bench-seed:
	hack/bench.sh -cache-mib 32768 -volume-gib 4096 -working-sets 1Gi,4Gi,16Gi -runs 10 -read-tests seq1m-q8t1-read \
		-restage-runs 0 -restart-runs 0 -tree-working-set "" -reboot-working-set "" -cold-writes=false -runtime 0 \
		-timeout 300m -output-dir _output/bench-seed $(BENCH_ARGS)

## bench-scattered: issue #36's scattered workload: RND4K Q32T1 reads over 100 hot zones of 4 MiB spread over a 4 TiB volume (the others: their origins), 32 GiB caches, 3 runs; bytes promoted against hot and touched bytes (about 10 min; needs about 4 GiB free)
bench-scattered:
	hack/bench.sh -cache-mib 32768 -volume-gib 4096 -working-sets 400Mi -runs 3 -read-tests rnd4k-q32t1-scattered-read \
		-scatter-zones 100 -io-limit 24Mi -runtime 120s \
		-restage-runs 0 -restart-runs 0 -tree-working-set "" -reboot-working-set "" -cold-writes=false \
		-timeout 60m -output-dir _output/bench-scattered $(BENCH_ARGS)

## stress: 32 volumes staged, cached, published, unpublished and unstaged in parallel for STRESS_ROUNDS rounds (10) in the VM, caches attached and resized meanwhile
STRESS_ROUNDS ?= 10
stress:
	SSDCACHE_STRESS_ROUNDS=$(STRESS_ROUNDS) hack/test-kernel.sh -run '^TestStress$$' -timeout 150m

## stress-connect: csi-provisioner's first connection to a new plugin pod, CONNECT_STARTS plugin starts (default 10) under a reader's load, the node's daemons alternately in system.slice and in the root cgroup (TestSidecarFirstConnection; 11 min for 12 starts on an idle machine, 44 min for 10 under load)
CONNECT_STARTS ?= 10
stress-connect:
	SSDCACHE_E2E_CONNECT_STARTS=$(CONNECT_STARTS) hack/test-e2e.sh -run '^TestSidecarFirstConnection$$' -timeout 120m

## bench-api: on a real API server, 1,000 CacheBindings over 100 nodes (admission latency, steady-state status writes), then 10,000 (the controller's and one node plugin's memory); only test/api, no other API server beside it; BENCH_API_RUN=TestScaleAdmission for one
bench-api:
	KUBEBUILDER_ASSETS=$$(hack/envtest-assets.sh | tail -n 1) SSDCACHE_API_SCALE=1 \
		SSDCACHE_CONTROLLER_ROLE=$(CURDIR)/deploy/rbac/controller/role.yaml \
		$(GO) test -count=1 -timeout 40m -v -run '^($(or $(BENCH_API_RUN),TestScaleAdmission|TestMemoryAtScale))$$' ./test/api/

## release: binaries (amd64, arm64), image (one OCI archive, linux/amd64 and linux/arm64; arm64's Debian layer is built under qemu-user the first time), chart, Helm repository index.yaml, CRDs and SHA256SUMS of one VERSION into _output/release/; with OCI_REGISTRY=host/path also pushes chart and image there (hack/release.sh)
release:
	hack/release.sh "$(VERSION)" _output/release

## image: the container image tagged $(VERSION), the chart's appVersion in a release of the same VERSION: docker build (this machine's architecture) where docker runs, else the OCI archive hack/release.sh builds, for linux/amd64 only (no container engine), into _output/image/
image:
	@if command -v docker >/dev/null && docker info >/dev/null 2>&1; then \
		docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) . ; \
	else \
		mkdir -p _output/image && \
		$(GO) run ./test/e2e/images/cmd/mkimages -out _output/image -repo . -project docker.io/$(IMAGE) -version $(VERSION) ; \
	fi
	@echo "image $(IMAGE): install a chart of another version with --set image.tag=$(VERSION)"
