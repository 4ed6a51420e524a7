# ssdcache: `make test` runs everything CI runs; `make demo` shows the cache on a real kernel.
SHELL := /usr/bin/env bash
GO ?= go
CACHE_DIR ?= $(HOME)/.cache/ssdcache
export CACHE_DIR

.PHONY: all build test test-unit vet test-api test-kernel bench demo generate manifests verify-generated

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/...

vet:
	$(GO) vet ./...

## test-unit: parsers, planners, CSI handlers with fakes, in-process csi-sanity (no root, VM or API server)
test-unit:
	$(GO) test -short -count=1 ./...

test: vet test-unit
