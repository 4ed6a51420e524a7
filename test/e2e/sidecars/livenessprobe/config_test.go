package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaultsAndChartsCommandLine(t *testing.T) {
	defaults, err := parseFlags(nil)
	if err != nil {
		t.Fatalf("parseFlags(defaults): %v", err)
	}
	if want := (config{csiAddress: "/run/csi/socket", httpEndpoint: ":9808", probeTimeout: time.Second}); defaults != want {
		t.Errorf("defaults = %+v, want %+v", defaults, want)
	}

	cfg, err := parseFlags([]string{"--csi-address=/csi/csi.sock", "--http-endpoint=:9898", "--probe-timeout=3s", "--v=5"})
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
	if want := (config{csiAddress: "/csi/csi.sock", httpEndpoint: ":9898", probeTimeout: 3 * time.Second}); cfg != want {
		t.Errorf("parseFlags = %+v, want %+v", cfg, want)
	}
}

func TestParseFlagsRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantInErr string
	}{
		{[]string{"--csi-address="}, `--csi-address ""`},
		{[]string{"--http-endpoint="}, `--http-endpoint ""`},
		{[]string{"--probe-timeout=-1s"}, "--probe-timeout -1s: must be a positive duration"},
		{[]string{"stray"}, "unexpected arguments"},
	} {
		_, err := parseFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("parseFlags(%q) error = %v, want one containing %q", tc.args, err, tc.wantInErr)
		}
	}
}
