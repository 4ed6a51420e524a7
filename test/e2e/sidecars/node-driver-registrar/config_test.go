package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlagsAcceptsTheChartsCommandLine(t *testing.T) {
	cfg, err := parseFlags([]string{
		"--csi-address=/csi/csi.sock",
		"--kubelet-registration-path=/var/lib/kubelet/plugins/ssdcache.io/csi.sock",
		"--http-endpoint=:9809",
		"--v=2",
	})
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
	want := config{
		csiAddress:              "/csi/csi.sock",
		kubeletRegistrationPath: "/var/lib/kubelet/plugins/ssdcache.io/csi.sock",
		pluginRegistrationPath:  "/registration",
		httpEndpoint:            ":9809",
		timeout:                 time.Second,
	}
	if cfg != want {
		t.Errorf("parseFlags = %+v, want %+v", cfg, want)
	}
}

func TestParseFlagsRejectsBadValues(t *testing.T) {
	const kubelet = "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock"
	for _, tc := range []struct {
		args      []string
		wantInErr string
	}{
		{[]string{"--csi-address=/csi/csi.sock"}, `--kubelet-registration-path ""`},
		{[]string{"--kubelet-registration-path=plugins/x/csi.sock"}, `--kubelet-registration-path "plugins/x/csi.sock": must be an absolute path`},
		{[]string{kubelet, "--csi-address="}, `--csi-address ""`},
		{[]string{kubelet, "--plugin-registration-path="}, `--plugin-registration-path ""`},
		{[]string{kubelet, "--timeout=0s"}, "--timeout 0s: must be a positive duration"},
		{[]string{kubelet, "stray"}, "unexpected arguments"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
	} {
		_, err := parseFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("parseFlags(%q) error = %v, want one containing %q", tc.args, err, tc.wantInErr)
		}
	}
}
