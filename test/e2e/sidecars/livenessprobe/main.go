// Command livenessprobe is a TEST STAND-IN for the upstream CSI sidecar
// registry.k8s.io/sig-storage/livenessprobe:v2.16.0
// (github.com/kubernetes-csi/livenessprobe). It exists because the Go module
// proxy available to this project serves no version of that module, and the
// e2e test builds every image from Go modules. It is used only by test/e2e; a
// real installation runs the upstream image the chart names.
//
// As upstream, it waits (up to five minutes) for the CSI socket, learns the
// driver name with GetPluginInfo, and then answers GET /healthz by dialing the
// socket and calling Identity.Probe within --probe-timeout: 200 "ok" when the
// driver is ready (Probe's ready field absent or true), 500 with the error
// text otherwise. kubelet's liveness probe on the plugin container points at
// it, so a hung plugin gets restarted.
//
// Flags (upstream names and defaults, except --http-endpoint, see below):
//
//	--csi-address    CSI socket of the driver (default /run/csi/socket)
//	--http-endpoint  host:port of /healthz (default :9808, upstream's
//	                 --health-port default; upstream's own default is "")
//	--probe-timeout  timeout of one Probe, connection included (default 1s)
//	--v and the other klog flags
//
// Not implemented (the chart uses none of them): --health-port,
// --metrics-address, --metrics-path and the CSI call metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/sidecar"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		klog.ErrorS(err, "Invalid command line")
		klog.FlushAndExit(klog.ExitFlushTimeout, 2)
	}
	httpLis, err := sidecar.ListenHTTP("http-endpoint", cfg.httpEndpoint)
	if err != nil {
		klog.ErrorS(err, "Cannot serve /healthz")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	klog.InfoS("Starting livenessprobe stand-in", "upstreamVersion", upstreamVersion)
	if err := run(ctx, cfg, httpLis); err != nil {
		klog.ErrorS(err, "livenessprobe failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.InfoS("Stopped")
	klog.Flush()
}
