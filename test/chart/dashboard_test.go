package chart

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func chartDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "ssdcache.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	return d
}

// grafanaVariable is a Grafana variable reference in a query.
var grafanaVariable = regexp.MustCompile(`\$\{?(\w+)\}?`)

// parseQuery parses a panel's query with Prometheus's parser, Grafana's
// interval variables as a duration and every other variable as the string
// "var:<name>", which is where the dashboard may use them (in a matcher's
// value).
func parseQuery(expr string) (parser.Expr, error) {
	filled := grafanaVariable.ReplaceAllStringFunc(expr, func(ref string) string {
		name := grafanaVariable.FindStringSubmatch(ref)[1]
		if strings.HasPrefix(name, "__") {
			return "5m" // $__rate_interval, $__interval
		}
		return "var:" + name
	})
	return parser.NewParser(parser.Options{}).ParseExpr(filled)
}

// labelValuesQuery parses a query variable's label_values(selector, label).
func labelValuesQuery(def string) (sel []*labels.Matcher, label string, err error) {
	m := regexp.MustCompile(`^label_values\((.+), *(\w+)\)$`).FindStringSubmatch(def)
	if m == nil {
		return nil, "", fmt.Errorf("%q is not label_values(selector, label)", def)
	}
	e, err := parseQuery(m[1])
	if err != nil {
		return nil, "", err
	}
	vs, ok := e.(*parser.VectorSelector)
	if !ok {
		return nil, "", fmt.Errorf("%q: %q is not a series selector", def, m[1])
	}
	return vs.LabelMatchers, m[2], nil
}

// selectorsOf are the series selectors of e.
func selectorsOf(e parser.Expr) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// filtersBy reports whether matchers select label =~ "$variable".
func filtersBy(matchers []*labels.Matcher, label string) bool {
	return slices.ContainsFunc(matchers, func(m *labels.Matcher) bool {
		return m.Name == label && m.Type == labels.MatchRegexp && m.Value == "var:"+label
	})
}

// TestDashboardNamesRealMetrics: every query of the Grafana dashboard parses
// with Prometheus's parser, Grafana's variables filled in, and names only
// series that the node plugin's code registers (pkg/agent), that the
// controller registers, that the node plugin's registry (controller-
// runtime's) serves for the process, or that csi-lib-utils produces for the
// plugin and its sidecars, so renaming a series fails here. Every ssdcache
// series carries the node label (issue 38 point 8), and every query filters
// by the dashboard's node variable, CSI's and the process's through the
// node plugin's ssdcache_cache_pool_up.
func TestDashboardNamesRealMetrics(t *testing.T) {
	d := chartDashboard(t)
	known := knownMetricNames(t)
	for name := range controllerMetricNames(t) {
		known[name] = true
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			e, err := parseQuery(target.Expr)
			if err != nil {
				t.Errorf("panel %q: query %q: %v", p.Title, target.Expr, err)
				continue
			}
			nodeFiltered := false
			for _, vs := range selectorsOf(e) {
				used[vs.Name] = true
				if !known[vs.Name] {
					t.Errorf("panel %q: query %q uses %s, which no code exports", p.Title, target.Expr, vs.Name)
				}
				if strings.HasPrefix(vs.Name, "ssdcache_") {
					if !filtersBy(vs.LabelMatchers, "node") {
						t.Errorf("panel %q: query %q selects %s without node=~\"$node\"", p.Title, target.Expr, vs.Name)
					}
					nodeFiltered = true
				}
			}
			if !nodeFiltered {
				t.Errorf("panel %q: query %q does not follow the node variable", p.Title, target.Expr)
			}
			// The disk series of one volume are three devices (volume, origin,
			// cache): a panel that summed them would mix the HDD and the SSD.
			if strings.Contains(target.Expr, "ssdcache_disk_") && !regexp.MustCompile(`by \([^)]*\bdevice\b`).MatchString(target.Expr) {
				t.Errorf("dashboard query %q sums disk series without keeping their device", target.Expr)
			}
		}
	}
	for _, want := range []string{"ssdcache_cache_read_hits_total", "ssdcache_cache_promotions_total", "ssdcache_cache_used_blocks", "ssdcache_cache_pool_up",
		// iostat's figures per device: utilisation, latency, IOPS, MB/s, queue depth.
		"ssdcache_disk_io_time_seconds_total", "ssdcache_disk_read_time_seconds_total", "ssdcache_disk_reads_completed_total",
		"ssdcache_disk_read_bytes_total", "ssdcache_disk_io_time_weighted_seconds_total",
		// The pools' capacity and the bindings' phases.
		"ssdcache_pool_size_bytes", "ssdcache_pool_free_bytes", "ssdcache_cachebinding_cache_attached",
		// The plugin's own cost.
		"process_cpu_seconds_total"} {
		if !used[want] {
			t.Errorf("dashboard does not show %s", want)
		}
	}
}

// TestDashboardVariables: the dashboard picks nodes from every node plugin's
// ssdcache_cache_pool_up and volumes from the chosen nodes' caches, each
// query parsed with Prometheus's parser.
func TestDashboardVariables(t *testing.T) {
	d := chartDashboard(t)
	want := map[string]struct {
		metric   string
		byNode   bool
		position int
	}{"node": {"ssdcache_cache_pool_up", false, 1}, "volume": {"ssdcache_cache_total_blocks", true, 2}}
	for i, v := range d.Templating.List {
		w, ok := want[v.Name]
		if !ok {
			continue
		}
		delete(want, v.Name)
		matchers, label, err := labelValuesQuery(v.Definition)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		metric := ""
		for _, m := range matchers {
			if m.Name == labels.MetricName {
				metric = m.Value
			}
		}
		if metric != w.metric || label != v.Name || filtersBy(matchers, "node") != w.byNode || i != w.position {
			t.Errorf("variable %s (position %d): label_values of %s, label %s, filtered by node %v; want position %d, %s, label %s, filtered by node %v",
				v.Name, i, metric, label, filtersBy(matchers, "node"), w.position, w.metric, v.Name, w.byNode)
		}
	}
	for name := range want {
		t.Errorf("no variable %s", name)
	}
}

// TestDashboardShowsPoolsAndPhases: a panel shows each node's pool sizes
// and free bytes, by node and pool, and one the bindings per phase.
func TestDashboardShowsPoolsAndPhases(t *testing.T) {
	d := chartDashboard(t)
	grouping := func(expr string) map[string][]string {
		e, err := parseQuery(expr)
		if err != nil {
			t.Fatalf("query %q: %v", expr, err)
		}
		out := map[string][]string{}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if a, ok := n.(*parser.AggregateExpr); ok && !a.Without {
				for _, vs := range selectorsOf(a.Expr) {
					out[vs.Name] = a.Grouping
				}
			}
			return nil
		})
		return out
	}
	found := map[string]bool{}
	for _, p := range d.Panels {
		byMetric := map[string][]string{}
		for _, target := range p.Targets {
			maps.Copy(byMetric, grouping(target.Expr))
		}
		size, free := byMetric["ssdcache_pool_size_bytes"], byMetric["ssdcache_pool_free_bytes"]
		if slices.Contains(size, "node") && slices.Contains(size, "pool") && slices.Contains(free, "node") && slices.Contains(free, "pool") {
			found["pools"] = true
		}
		if g := byMetric["ssdcache_cachebinding_cache_attached"]; slices.Equal(g, []string{"phase"}) {
			found["phases"] = true
		}
	}
	if !found["pools"] {
		t.Error("no panel shows ssdcache_pool_size_bytes and ssdcache_pool_free_bytes by node and pool")
	}
	if !found["phases"] {
		t.Error("no panel shows ssdcache_cachebinding_cache_attached by phase")
	}
}

// knownMetricNames collects the series names of the agent's metrics, of the
// process collector controller-runtime's registry holds (which ssdcache-node
// serves) and of csi-lib-utils (plugin and sidecar), histograms expanded.
func knownMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := &recordingRegisterer{}
	if _, err := agent.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	descName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range reg.collectors {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for desc := range ch {
			if m := descName.FindStringSubmatch(desc.String()); m != nil {
				known[m[1]] = true
			}
		}
	}
	process, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range process {
		if strings.HasPrefix(f.GetName(), "process_") {
			known[f.GetName()] = true
		}
	}
	for _, mm := range []metrics.CSIMetricsManager{metrics.NewCSIMetricsManagerForPlugin(ssdv1.DriverName), metrics.NewCSIMetricsManagerForSidecar(ssdv1.DriverName)} {
		mm.RecordMetrics("/csi.v1.Node/NodeStageVolume", errors.New("x"), time.Millisecond)
		families, err := mm.GetRegistry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				if !strings.HasPrefix(f.GetName(), "csi_") {
					continue
				}
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "driver_name" }) {
					t.Errorf("%s has no driver_name label, which the dashboard filters on", f.GetName())
				}
			}
			known[f.GetName()] = true
			if f.GetType().String() == "HISTOGRAM" {
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					known[f.GetName()+suffix] = true
				}
			}
		}
	}
	return known
}

type recordingRegisterer struct{ collectors []prometheus.Collector }

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

func (r *recordingRegisterer) Unregister(prometheus.Collector) bool { return false }
