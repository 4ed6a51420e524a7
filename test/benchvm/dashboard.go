package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/pkg/dashboard"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// DashboardSVG is the chart's dashboard drawn over the run, beside the report.
const DashboardSVG = "dashboard.svg"

// drawDashboard draws the chart's Grafana dashboard over the node's metrics
// as the guest recorded them into dashboard.svg, each working set's start
// marked, and returns report.md's section on it: what it shows, the marks,
// and the panels that had nothing to show. The dashboard is a view of the
// run, not its result: when it cannot be drawn, the section says why and
// the bench's report stands.
func drawDashboard(ctx context.Context, o options, r *bench.Report) string {
	logPath := filepath.Join(o.outputDir, "parts", parts.MetricsLog)
	log, err := os.Open(logPath)
	if errors.Is(err, fs.ErrNotExist) {
		return "" // parts of a run before the guest recorded metrics
	}
	if err == nil {
		defer log.Close()
		var section string
		if section, err = renderDashboard(ctx, o, r, log, logPath); err == nil {
			return section
		}
	}
	return fmt.Sprintf("## The dashboard over this run\n\nNot drawn: %v\n", err)
}

func renderDashboard(ctx context.Context, o options, r *bench.Report, log io.Reader, logPath string) (string, error) {
	data, err := os.ReadFile(o.dashboard)
	if err != nil {
		return "", err
	}
	d, err := dashboard.Parse(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.dashboard, err)
	}
	tsdbDir, err := os.MkdirTemp("", "bench-dashboard-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tsdbDir)
	var svg bytes.Buffer
	marks, legend := partMarks(r)
	shown, span, err := dashboard.Render(ctx, d, log, tsdbDir, &svg, dashboard.SVG, marks)
	if err != nil {
		return "", fmt.Errorf("drawing %s over %s: %w", o.dashboard, logPath, err)
	}
	if err := os.WriteFile(filepath.Join(o.outputDir, DashboardSVG), svg.Bytes(), 0o644); err != nil {
		return "", err
	}
	return dashboardSection(o.dashboard, shown, span, legend), nil
}

// partMarks numbers the working sets in the order they ran and marks where
// each began: its first ssdcache-bench test on any target.
func partMarks(r *bench.Report) ([]dashboard.Mark, []string) {
	first := map[string]time.Time{}
	for _, res := range r.Results {
		if at, seen := first[res.WorkingSet]; !res.StartedAt.IsZero() && (!seen || res.StartedAt.Before(at)) {
			first[res.WorkingSet] = res.StartedAt
		}
	}
	var marks []dashboard.Mark
	for ws, at := range first {
		marks = append(marks, dashboard.Mark{At: at, Label: ws})
	}
	slices.SortFunc(marks, func(a, b dashboard.Mark) int { return a.At.Compare(b.At) })
	var legend []string
	for i := range marks {
		legend = append(legend, fmt.Sprintf("%d %s", i+1, marks[i].Label))
		marks[i].Label = fmt.Sprint(i + 1)
	}
	return marks, legend
}

func dashboardSection(path string, shown []dashboard.Shown, span dashboard.Span, marks []string) string {
	var b strings.Builder
	b.WriteString("## The dashboard over this run\n\n")
	fmt.Fprintf(&b, "[%s](%s): every panel of `%s`, evaluated by Prometheus's PromQL engine (pkg/dashboard) over ssdcache-node's `/metrics` as the guest scraped it every %v, %d scrapes over %s, both boots (%d failed: the plugin restart and the reboot, the gaps in the lines); minutes from the first scrape. The numbered dashed lines are where each working set began: %s.\n\n",
		DashboardSVG, DashboardSVG, path, span.Interval, span.Scrapes, span.Last.Sub(span.First).Round(time.Second), span.Failed, strings.Join(marks, ", "))
	for _, s := range shown {
		switch {
		case len(s.Errors) > 0:
			fmt.Fprintf(&b, "- **%s: query failed**: %s\n", s.Panel.Title, strings.Join(s.Errors, "; "))
		case len(s.Lines) == 0:
			fmt.Fprintf(&b, "- %s: no data\n", s.Panel.Title)
		}
	}
	return b.String()
}
