package main

import (
	"context"
	"os"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/cache"
)

// killAt is the kernel suite's crash switch: it kills the process the way
// kill -9 would, at one named step, so a test can prove recovery from it.
type killAt string

func (k killAt) Reached(_ context.Context, point string) {
	if point != string(k) {
		return
	}
	klog.InfoS("Fault point reached; killing the process", "point", point)
	klog.Flush()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

func faultPoints(point string) cache.FaultPoints {
	if point == "" {
		return cache.NoFaults{}
	}
	return killAt(point)
}
