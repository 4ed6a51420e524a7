package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/sidecar"
)

// upstreamVersion is the release whose behaviour this stand-in follows.
const upstreamVersion = "v2.14.0"

// config is the parsed command line.
type config struct {
	csiAddress              string
	kubeletRegistrationPath string
	pluginRegistrationPath  string
	httpEndpoint            string
	timeout                 time.Duration
}

// parseFlags parses and validates the command line (without the program name).
func parseFlags(args []string) (config, error) {
	var cfg config
	fs := sidecar.NewFlagSet("node-driver-registrar")
	fs.StringVar(&cfg.csiAddress, "csi-address", "/run/csi/socket", "Path of the CSI driver socket that the node-driver-registrar will connect to.")
	fs.StringVar(&cfg.kubeletRegistrationPath, "kubelet-registration-path", "", "Path of the CSI driver socket on the Kubernetes host machine.")
	fs.StringVar(&cfg.pluginRegistrationPath, "plugin-registration-path", "/registration", "Path to Kubernetes plugin registration directory.")
	fs.StringVar(&cfg.httpEndpoint, "http-endpoint", "", "TCP address (e.g. :9809) of the /healthz server, which checks the registration socket; empty disables it.")
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "Timeout for waiting for communication with driver.")
	if err := sidecar.ParseFlags(fs, args); err != nil {
		return config{}, err
	}
	return cfg, cfg.validate()
}

// validate rejects values upstream would reject or that kubelet cannot use.
func (c config) validate() error {
	if c.csiAddress == "" {
		return fmt.Errorf("--csi-address %q: must name the CSI socket, e.g. /csi/csi.sock", c.csiAddress)
	}
	if c.kubeletRegistrationPath == "" {
		return fmt.Errorf("--kubelet-registration-path %q: required, the CSI socket's path on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock", c.kubeletRegistrationPath)
	}
	// kubelet dials this path from its own mount namespace; relative means nothing there.
	if !filepath.IsAbs(c.kubeletRegistrationPath) {
		return fmt.Errorf("--kubelet-registration-path %q: must be an absolute path", c.kubeletRegistrationPath)
	}
	if c.pluginRegistrationPath == "" {
		return fmt.Errorf("--plugin-registration-path %q: must name kubelet's plugin registry directory, e.g. /registration", c.pluginRegistrationPath)
	}
	if c.timeout <= 0 {
		return fmt.Errorf("--timeout %s: must be a positive duration, e.g. 1s", c.timeout)
	}
	return nil
}
