// Command node-driver-registrar is a TEST STAND-IN for the upstream CSI
// sidecar registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.14.0
// (github.com/kubernetes-csi/node-driver-registrar). It exists because the Go
// module proxy available to this project serves no version of that module,
// and the e2e test builds every image from Go modules. It is used only by
// test/e2e; a real installation runs the upstream image the chart names.
//
// It does what upstream does in its default --mode=registration: wait for the
// CSI socket to answer, learn the driver name with GetPluginInfo, then serve
// kubelet's plugin registration API (pluginregistration/v1) on
// <plugin-registration-path>/<driver>-reg.sock, answering GetInfo with type
// CSIPlugin, the driver name, --kubelet-registration-path and version 1.0.0.
// A NotifyRegistrationStatus with PluginRegistered=false makes it exit 1 so
// that kubelet restarts it and registration is retried; SIGTERM removes the
// socket and exits 0.
//
// Flags (upstream names and defaults):
//
//	--csi-address                CSI socket of the driver (default /run/csi/socket)
//	--kubelet-registration-path  the same socket as kubelet sees it (required)
//	--plugin-registration-path   kubelet's plugin registry dir (default /registration)
//	--http-endpoint              host:port of /healthz; empty disables it (default "")
//	--timeout                    timeout of each gRPC call (default 1s)
//	--v and the other klog flags
//
// /healthz answers 200 "ok" when the registration socket exists and answers
// GetInfo with the driver name, 404 when the socket is missing, 500 otherwise.
//
// Not implemented (the chart uses none of them): --mode=kubelet-registration-probe
// and its registration probe file, --health-port, --enable-pprof, --version,
// --connection-timeout. Unlike upstream, which gives up after 30 seconds, the
// stand-in waits for the CSI socket until it is stopped.
package main

import (
	"context"
	"errors"
	"flag"
	"net"
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
	exit := func(code int) { klog.FlushAndExit(klog.ExitFlushTimeout, code) }

	var httpLis net.Listener
	if cfg.httpEndpoint != "" {
		if httpLis, err = sidecar.ListenHTTP("http-endpoint", cfg.httpEndpoint); err != nil {
			klog.ErrorS(err, "Cannot serve /healthz")
			exit(1)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	klog.InfoS("Starting node-driver-registrar stand-in", "upstreamVersion", upstreamVersion, "mode", "registration")
	if err := newRegistrar(cfg, exit).run(ctx, httpLis); err != nil {
		klog.ErrorS(err, "node-driver-registrar failed")
		exit(1)
	}
	klog.InfoS("Stopped")
	klog.Flush()
}
