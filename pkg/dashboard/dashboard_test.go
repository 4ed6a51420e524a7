package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/dashboard/scrapelog"
)

var start = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// scrapeLog is a minute of scrapes every 2 s of node-a's plugin: one volume
// reading 3 hits and 1 miss per second, NodeStageVolume calls of 0.05 s,
// once a second, and the node's pools; and, as a scrape of the controller
// adds them, three CacheBindings, two Attached and one Pending.
func scrapeLog() string {
	var b strings.Builder
	for s := 0; s <= 60; s += 2 {
		fmt.Fprintf(&b, "%s%d\n", scrapelog.Marker, start.Add(time.Duration(s)*time.Second).UnixMilli())
		fmt.Fprintf(&b, "# TYPE ssdcache_cache_pool_up gauge\nssdcache_cache_pool_up{node=\"node-a\"} 1\n")
		fmt.Fprintf(&b, "ssdcache_node_pool_ready{node=\"node-a\",pool=\"origin\"} 1\nssdcache_node_pool_ready{node=\"node-a\",pool=\"cache\"} 1\n")
		for _, pool := range []string{`class="",node="node-a",pool="origin",vg="ssdcache-hdd"} 4e+12 3e+12`, `class="nvme",node="node-a",pool="cache",vg="ssdcache-ssd"} 1e+12 5e+11`} {
			l, v, _ := strings.Cut(pool, "} ")
			size, free, _ := strings.Cut(v, " ")
			fmt.Fprintf(&b, "ssdcache_pool_size_bytes{%s} %s\nssdcache_pool_free_bytes{%s} %s\n", l, size, l, free)
		}
		for _, bd := range []string{`cachebinding="a",phase="Attached",reason="Attached"} 1`, `cachebinding="b",phase="Attached",reason="Attached"} 1`,
			`cachebinding="c",phase="Pending",reason="InsufficientCache"} 0`} {
			fmt.Fprintf(&b, "ssdcache_cachebinding_cache_attached{namespace=\"team-a\",node=\"node-a\",%s\n", bd)
		}
		vol := `namespace="team-a",node="node-a",persistentvolumeclaim="data",volume="pvc-a"`
		fmt.Fprintf(&b, "# TYPE ssdcache_cache_read_hits_total counter\nssdcache_cache_read_hits_total{%s} %d\n", vol, 3*s)
		fmt.Fprintf(&b, "# TYPE ssdcache_cache_read_misses_total counter\nssdcache_cache_read_misses_total{%s} %d\n", vol, s)
		fmt.Fprintf(&b, "# TYPE ssdcache_cache_used_blocks gauge\nssdcache_cache_used_blocks{%s} 512\n", vol)
		fmt.Fprintf(&b, "# TYPE ssdcache_cache_total_blocks gauge\nssdcache_cache_total_blocks{%s} 1024\n", vol)
		fmt.Fprintf(&b, "# TYPE csi_plugin_operations_seconds histogram\n")
		op := `driver_name="ssdcache.io",grpc_status_code="OK",method_name="/csi.v1.Node/NodeStageVolume"`
		fmt.Fprintf(&b, "csi_plugin_operations_seconds_bucket{%s,le=\"0.1\"} %d\n", op, s)
		fmt.Fprintf(&b, "csi_plugin_operations_seconds_bucket{%s,le=\"+Inf\"} %d\n", op, s)
		fmt.Fprintf(&b, "csi_plugin_operations_seconds_sum{%s} %g\ncsi_plugin_operations_seconds_count{%s} %d\n", op, 0.05*float64(s), op, s)
	}
	return b.String()
}

func chartDashboard(t *testing.T) Dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "ssdcache", "dashboards", "ssdcache.json"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func shownPanel(t *testing.T, shown []Shown, title string) Shown {
	t.Helper()
	for _, s := range shown {
		if s.Panel.Title == title {
			return s
		}
	}
	t.Fatalf("no panel %q", title)
	return Shown{}
}

// TestRenderDrawsTheChartsDashboard evaluates the chart's own dashboard
// over a known log: the figures the panels show are the log's.
func TestRenderDrawsTheChartsDashboard(t *testing.T) {
	var svg bytes.Buffer
	marks := []Mark{{At: start.Add(30 * time.Second), Label: "restaged"}, {At: start.Add(time.Hour), Label: "after the log"}}
	shown, span, err := Render(context.Background(), chartDashboard(t), strings.NewReader(scrapeLog()), t.TempDir(), &svg, SVG, marks)
	if err != nil {
		t.Fatal(err)
	}
	if span.Scrapes != 31 || span.Interval != 2*time.Second || !span.First.Equal(start) || span.Last.Sub(span.First) != time.Minute {
		t.Errorf("span %+v, want 31 scrapes 2 s apart over a minute from %s", span, start)
	}
	want := map[string]struct {
		legend string
		value  float64
	}{
		"Read hit ratio by volume":           {"team-a/data pvc-a", 0.75},
		"Cache fill by volume":               {"team-a/data pvc-a", 0.5},
		"CSI calls per second (node plugin)": {"/csi.v1.Node/NodeStageVolume OK", 1},
		"CSI call latency p99 (node plugin)": {"/csi.v1.Node/NodeStageVolume", 0.099},
	}
	for title, w := range want {
		s := shownPanel(t, shown, title)
		if len(s.Errors) > 0 || len(s.Lines) != 1 || s.Lines[0].Legend != w.legend {
			t.Errorf("panel %q: lines %d (errors %v), want one named %q", title, len(s.Lines), s.Errors, w.legend)
			continue
		}
		pts := s.Lines[0].Points
		if got := pts[len(pts)-1].F; math.Abs(got-w.value) > 0.001 {
			t.Errorf("panel %q: last value %g, want %g", title, got, w.value)
		}
	}
	for title, want := range map[string]map[string]float64{
		"Pool capacity by node": {"node-a origin ssdcache-hdd size": 4e12, "node-a origin ssdcache-hdd free": 3e12,
			"node-a cache ssdcache-ssd size": 1e12, "node-a cache ssdcache-ssd free": 5e11},
		"CacheBindings by phase": {"Attached": 2, "Pending": 1},
		// A node with a cache pool configured (pool="cache").
		"Cache health": {"pool up node-a": 1},
	} {
		s := shownPanel(t, shown, title)
		got := map[string]float64{}
		for _, l := range s.Lines {
			got[l.Legend] = l.Points[len(l.Points)-1].F
		}
		if len(s.Errors) > 0 || !maps.Equal(got, want) {
			t.Errorf("panel %q: last values %v (errors %v), want %v", title, got, s.Errors, want)
		}
	}
	if s := shownPanel(t, shown, "CSI calls per second (external-provisioner)"); len(s.Lines) != 0 || len(s.Errors) != 0 {
		t.Errorf("a panel of series not in the log shows %d lines, errors %v", len(s.Lines), s.Errors)
	}
	for _, text := range []string{"<svg", "Read hit ratio by volume", "No data", "team-a/data pvc-a  75%", ">restaged<"} {
		if !strings.Contains(svg.String(), text) {
			t.Errorf("the drawing lacks %q", text)
		}
	}
	if got := strings.Count(svg.String(), ">restaged<"); got != len(shown) {
		t.Errorf("the mark is drawn on %d panels, want all %d", got, len(shown))
	}
	if strings.Contains(svg.String(), "after the log") {
		t.Error("a mark after the log's span is drawn")
	}
}

func TestEvaluateReportsFailedQueriesAndUnknownVariables(t *testing.T) {
	d, err := Parse([]byte(`{"panels": [{"title": "bad", "gridPos": {"w": 24, "h": 8},
		"targets": [{"expr": "rate(x[$nope])"}, {"expr": "sum("}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var png bytes.Buffer
	shown, _, err := Render(context.Background(), d, strings.NewReader(scrapeLog()), t.TempDir(), &png, PNG, nil)
	if err != nil {
		t.Fatal(err)
	}
	if errs := shown[0].Errors; len(errs) != 2 || !strings.Contains(errs[0], "$nope") {
		t.Errorf("errors %q, want both queries failed, the first naming $nope", errs)
	}
	if !bytes.HasPrefix(png.Bytes(), []byte("\x89PNG")) {
		t.Error("no PNG written")
	}
	d.Templating.List = []Variable{{Name: "node", Type: "query"}}
	if _, err := Evaluate(context.Background(), d, nil, Span{}); err == nil || !strings.Contains(err.Error(), `"node"`) {
		t.Errorf("a variable without allValue: err %v, want one naming it", err)
	}
}

func TestParseRefusesPanelsOffTheGrid(t *testing.T) {
	for _, pos := range []string{`{"w": 0, "h": 8}`, `{"w": 12, "h": 0}`, `{"x": 13, "w": 12, "h": 8}`, `{"x": -1, "w": 1, "h": 1}`} {
		if _, err := Parse([]byte(`{"panels": [{"title": "p", "gridPos": ` + pos + `}]}`)); err == nil || !strings.Contains(err.Error(), `panel "p": gridPos`) {
			t.Errorf("gridPos %s: err %v, want one naming the panel and its gridPos", pos, err)
		}
	}
	if _, err := Parse([]byte(`{"title": "empty"}`)); err == nil {
		t.Error("a dashboard without panels was taken")
	}
}

func TestLoadRefusesLogsWithoutAGoodScrape(t *testing.T) {
	for name, log := range map[string]string{
		"empty":             "",
		"not a time":        scrapelog.Marker + "soon\nx 1\n",
		"broken exposition": scrapelog.Marker + "1000\nx{ 1\n",
		"only failures":     scrapelog.Marker + "1000" + scrapelog.FailedMarker + "connection refused\n",
	} {
		if _, _, err := Render(context.Background(), Dashboard{Panels: []Panel{{}}}, strings.NewReader(log), t.TempDir(), &bytes.Buffer{}, SVG, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestLoadMarksGoneSeriesStale: a series missing from a scrape, and every
// series at a failed or unreadable scrape, is stale from there, as in
// Prometheus, so a panel shows no value in the gap and draws no line across
// it; entries out of order are left out and counted.
func TestLoadMarksGoneSeriesStale(t *testing.T) {
	entry := func(s int, body string) string {
		return fmt.Sprintf("%s%d\n%s\n", scrapelog.Marker, start.Add(time.Duration(s)*time.Second).UnixMilli(), body)
	}
	failed := func(s int) string {
		return fmt.Sprintf("%s%d%sconnection refused\n", scrapelog.Marker, start.Add(time.Duration(s)*time.Second).UnixMilli(), scrapelog.FailedMarker)
	}
	var log strings.Builder
	for s := 0; s <= 600; s += 10 {
		switch {
		case s > 100 && s < 300: // the plugin is down: both gone
			log.WriteString(failed(s))
		case s == 300:
			log.WriteString(entry(s, "a 1\nb{ 2")) // cut short
		case s > 400 && s < 500: // b is gone
			log.WriteString(entry(s, "a 1"))
		default:
			log.WriteString(entry(s, "a 1\nb 2"))
		}
	}
	log.WriteString(entry(590, "a 1")) // out of order
	d, err := Parse([]byte(`{"panels": [{"title": "p", "gridPos": {"w": 24, "h": 8}, "targets": [{"expr": "a"}, {"expr": "b"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var svg bytes.Buffer
	shown, span, err := Render(context.Background(), d, strings.NewReader(log.String()), t.TempDir(), &svg, SVG, nil)
	if err != nil {
		t.Fatal(err)
	}
	if span.Scrapes != 41 || span.Failed != 20 || span.Skipped != 1 {
		t.Errorf("span %+v, want 41 scrapes, 20 failed (19 logged, 1 unreadable), 1 skipped", span)
	}
	for _, l := range shown[0].Lines {
		var gaps []string
		segs := segments(l, span, shown[0].Step)
		for i := 1; i < len(segs); i++ {
			gaps = append(gaps, fmt.Sprintf("%.2f-%.2f", segs[i-1][len(segs[i-1])-1].X, segs[i][0].X))
		}
		want := map[string]string{"a": "1.67-5.17", "b": "1.67-5.17 6.67-8.33"}[l.Legend]
		if got := strings.Join(gaps, " "); got != want {
			t.Errorf("series %s: gaps in minutes %q, want %q", l.Legend, got, want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for _, c := range []struct {
		unit string
		v    float64
		want string
	}{
		{"percentunit", 0.755, "75.5%"}, {"bytes", 3 << 20, "3 MiB"}, {"Bps", 2.5e8, "250 MB/s"},
		{"s", 0.0123, "12.3 ms"}, {"s", 2, "2 s"}, {"iops", 1500, "1.5 k io/s"}, {"short", 0, "0"}, {"reqps", 12, "12 req/s"},
	} {
		if got := formatValue(c.unit, c.v); got != c.want {
			t.Errorf("formatValue(%q, %g) = %q, want %q", c.unit, c.v, got, c.want)
		}
	}
}
