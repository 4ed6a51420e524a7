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
// Its flags (see parseFlags) are upstream's, with upstream's defaults, and
// klog's --v and friends.
//
// /healthz answers 200 "ok" when the registration socket exists and answers
// GetInfo with the driver name, 404 when the socket is missing, 500 otherwise.
//
// Not implemented, so rejected as unknown flags (the chart uses none of them):
// --mode=kubelet-registration-probe and its registration probe file,
// --health-port, --enable-pprof, --version, --connection-timeout. Unlike
// upstream, which gives up after 30 seconds, the stand-in waits for the CSI
// socket until it is stopped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// upstreamVersion is the release whose behaviour this stand-in follows.
const upstreamVersion = "v2.14.0"

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		klog.ErrorS(err, "Invalid command line")
		klog.FlushAndExit(klog.ExitFlushTimeout, 2)
	}
	// Listening before the long wait for the driver makes a bad --http-endpoint fail at once.
	var httpLis net.Listener
	if cfg.httpEndpoint != "" {
		if httpLis, err = net.Listen("tcp", cfg.httpEndpoint); err != nil {
			klog.ErrorS(err, "Cannot serve /healthz on --http-endpoint (want host:port, e.g. \":9809\")")
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	klog.InfoS("Starting node-driver-registrar stand-in", "upstreamVersion", upstreamVersion, "mode", "registration")
	if err := run(ctx, cfg, httpLis); err != nil {
		klog.ErrorS(err, "node-driver-registrar failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.InfoS("Stopped")
	klog.Flush()
}

// config is the parsed command line.
type config struct {
	csiAddress              string
	kubeletRegistrationPath string
	pluginRegistrationPath  string
	httpEndpoint            string
	timeout                 time.Duration
}

// parseFlags parses and validates the command line (without the program name).
// Like upstream, it takes klog's flags (--v and friends) and nothing but flags;
// an upstream flag the stand-in lacks is an error, so a chart that starts
// passing one fails at once instead of being silently ignored.
func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("node-driver-registrar", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.StringVar(&cfg.csiAddress, "csi-address", "/run/csi/socket", "Path of the CSI driver socket that the node-driver-registrar will connect to.")
	fs.StringVar(&cfg.kubeletRegistrationPath, "kubelet-registration-path", "", "Path of the CSI driver socket on the Kubernetes host machine.")
	fs.StringVar(&cfg.pluginRegistrationPath, "plugin-registration-path", "/registration", "Path to Kubernetes plugin registration directory.")
	fs.StringVar(&cfg.httpEndpoint, "http-endpoint", "", "TCP address (e.g. :9809) of the /healthz server, which checks the registration socket; empty disables it.")
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "Timeout for waiting for communication with driver.")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q: only flags are allowed", fs.Args())
	}
	return cfg, cfg.validate()
}

// validate rejects values upstream would reject or that kubelet cannot use.
func (c config) validate() error {
	switch {
	case c.csiAddress == "":
		return errors.New(`--csi-address "": must name the CSI socket, e.g. /csi/csi.sock`)
	// kubelet dials this path from its own mount namespace; relative means nothing there.
	case !filepath.IsAbs(c.kubeletRegistrationPath):
		return fmt.Errorf("--kubelet-registration-path %q: required, the absolute path of the CSI socket on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock", c.kubeletRegistrationPath)
	case c.pluginRegistrationPath == "":
		return errors.New(`--plugin-registration-path "": must name kubelet's plugin registry directory, e.g. /registration`)
	case c.timeout <= 0:
		return fmt.Errorf("--timeout %s: must be a positive duration, e.g. 1s", c.timeout)
	}
	return nil
}
