package main

import (
	"fmt"
	"time"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/sidecar"
)

// upstreamVersion is the release whose behaviour this stand-in follows.
const upstreamVersion = "v2.16.0"

// config is the parsed command line.
type config struct {
	csiAddress   string
	httpEndpoint string
	probeTimeout time.Duration
}

// parseFlags parses and validates the command line (without the program name).
func parseFlags(args []string) (config, error) {
	var cfg config
	fs := sidecar.NewFlagSet("livenessprobe")
	fs.StringVar(&cfg.csiAddress, "csi-address", "/run/csi/socket", "Address of the CSI driver socket.")
	fs.StringVar(&cfg.httpEndpoint, "http-endpoint", ":9808", "TCP address of the HTTP server that serves the CSI driver health check at /healthz.")
	fs.DurationVar(&cfg.probeTimeout, "probe-timeout", time.Second, "Probe timeout in seconds.")
	if err := sidecar.ParseFlags(fs, args); err != nil {
		return config{}, err
	}
	return cfg, cfg.validate()
}

// validate rejects values the probe cannot work with.
func (c config) validate() error {
	if c.csiAddress == "" {
		return fmt.Errorf("--csi-address %q: must name the CSI socket, e.g. /csi/csi.sock", c.csiAddress)
	}
	if c.httpEndpoint == "" {
		return fmt.Errorf("--http-endpoint %q: must be a host:port to serve /healthz on, e.g. :9808", c.httpEndpoint)
	}
	if c.probeTimeout <= 0 {
		return fmt.Errorf("--probe-timeout %s: must be a positive duration, e.g. 1s", c.probeTimeout)
	}
	return nil
}
