package main

import (
	"io"
	"strings"
	"testing"
)

// TestCacheSizeFromTheClass: the chart passes a class's cache-size as given
// (a percentage) with the PVC's size; the working sets are percentages of
// the cache the driver gives such a volume (10% of 100Gi, whole MiB), and
// on volumes of their own ({ws}) they start at offset 0.
func TestCacheSizeFromTheClass(t *testing.T) {
	opts, err := parseFlags([]string{"-target=volume=/data/ws-{ws}/bench.dat", "-cache-size=10%", "-volume-size=100Gi",
		"-working-sets=25%,50%"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cache := int64(100<<30) / 10 &^ (1<<20 - 1) // 10240 MiB
	for i, ws := range opts.config.WorkingSets {
		want := cache * int64(25*(i+1)) / 100 &^ (1<<20 - 1)
		if ws.Bytes != want || ws.OffsetBytes != 0 {
			t.Errorf("working set %s: %d bytes at offset %d, want %d at 0", ws.Label, ws.Bytes, ws.OffsetBytes, want)
		}
	}
	shared, err := parseFlags([]string{"-target=volume=/data/bench.dat", "-cache-size=1Gi", "-working-sets=25%,50%"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := shared.config.WorkingSets[1].OffsetBytes; got != 256<<20 {
		t.Errorf("on one shared volume the second set starts at %d, want after the first (256Mi)", got)
	}
}

func TestCacheSizeErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-cache-size=10%"}, "-volume-size must be given"},
		{[]string{"-cache-size=150%", "-volume-size=1Gi"}, "whole number from 1% to 100%"},
		{[]string{"-cache-size=10%", "-volume-size=100Mi"}, "less than the minimum cache"},
		{[]string{"-cache-size=10%", "-volume-size=lots"}, "volume-size"},
	} {
		args := append([]string{"-target=volume=/data/bench.dat", "-working-sets=50%"}, c.args...)
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want it to say %q", c.args, err, c.want)
		}
	}
}
