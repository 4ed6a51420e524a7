package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// TestDashboardIsDrawnOverTheRecordedMetrics: the chart's own dashboard is
// drawn from the parts' metrics log, and the report names the panels with
// nothing to show; a run without a log gets no section.
func TestDashboardIsDrawnOverTheRecordedMetrics(t *testing.T) {
	o := options{outputDir: t.TempDir(), dashboard: filepath.Join("..", "..", "charts", "ssdcache", "dashboards", "ssdcache.json")}
	r := &bench.Report{Results: []bench.Result{
		{WorkingSet: "50% restaged", StartedAt: time.UnixMilli(1_800_000_040_000)},
		{WorkingSet: "50%", StartedAt: time.UnixMilli(1_800_000_010_000)},
		{WorkingSet: "50%", StartedAt: time.UnixMilli(1_800_000_005_000)},
	}}
	if note := drawDashboard(context.Background(), o, r); note != "" {
		t.Fatalf("without a metrics log: note %q, want none", note)
	}
	var log strings.Builder
	for s := int64(0); s <= 60; s += 5 {
		fmt.Fprintf(&log, "# scrape %d\n# TYPE ssdcache_cache_read_hits_total counter\nssdcache_cache_read_hits_total{volume=\"pvc-bench\"} %d\n", 1_800_000_000_000+s*1000, 10*s)
		fmt.Fprintf(&log, "# TYPE ssdcache_cache_read_misses_total counter\nssdcache_cache_read_misses_total{volume=\"pvc-bench\"} %d\n", 10*s)
	}
	if err := os.MkdirAll(filepath.Join(o.outputDir, "parts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.outputDir, "parts", parts.MetricsLog), []byte(log.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	note := drawDashboard(context.Background(), o, r)
	for _, want := range []string{"## The dashboard over this run", "13 scrapes over 1m0s, both boots (0 failed", "- Cache fill by volume: no data", "began: 1 50%, 2 50% restaged."} {
		if !strings.Contains(note, want) {
			t.Errorf("section lacks %q:\n%s", want, note)
		}
	}
	if strings.Contains(note, "Read hit ratio by volume") {
		t.Errorf("the hit-ratio panel has data but is listed:\n%s", note)
	}
	if svg, err := os.ReadFile(filepath.Join(o.outputDir, DashboardSVG)); err != nil || !strings.Contains(string(svg), "Read hit ratio by volume") {
		t.Errorf("%s: err %v, or no hit-ratio panel in it", DashboardSVG, err)
	}
}

// TestDashboardThatCannotBeDrawnIsANote: a log without one good scrape (the
// guest stopped before its first) leaves the report standing, with why.
func TestDashboardThatCannotBeDrawnIsANote(t *testing.T) {
	o := options{outputDir: t.TempDir(), dashboard: filepath.Join("..", "..", "charts", "ssdcache", "dashboards", "ssdcache.json")}
	if err := os.MkdirAll(filepath.Join(o.outputDir, "parts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.outputDir, "parts", parts.MetricsLog), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if note := drawDashboard(context.Background(), o, &bench.Report{}); !strings.Contains(note, "Not drawn: ") || !strings.Contains(note, "no readable scrape") {
		t.Errorf("note %q, want one saying why it is not drawn", note)
	}
}
