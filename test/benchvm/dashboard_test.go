package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

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
