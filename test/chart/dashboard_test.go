package chart

import (
	"encoding/json"
	"errors"
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
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// TestDashboardNamesRealMetrics: every metric name in the Grafana dashboard is
// one that the node plugin's code registers (pkg/agent), that its registry
// (controller-runtime's) serves for the process, or that csi-lib-utils
// produces for the plugin and its sidecars, so renaming a series fails here.
func TestDashboardNamesRealMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "ssdcache.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	known := knownMetricNames(t)
	name := regexp.MustCompile(`\b(ssdcache_[a-z_]+|csi_[a-z_]+|process_[a-z_]+)\b`)
	used := map[string]bool{}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	for _, e := range exprs {
		// The disk series of one volume are three devices (volume, origin,
		// cache): a panel that summed them would mix the HDD and the SSD.
		if strings.Contains(e, "ssdcache_disk_") && !regexp.MustCompile(`by \([^)]*\bdevice\b`).MatchString(e) {
			t.Errorf("dashboard query %q sums disk series without keeping their device", e)
		}
		for _, m := range name.FindAllString(e, -1) {
			used[m] = true
			if !known[m] {
				t.Errorf("dashboard query %q uses %s, which no code exports", e, m)
			}
		}
	}
	for _, want := range []string{"ssdcache_cache_read_hits_total", "ssdcache_cache_promotions_total", "ssdcache_cache_used_blocks", "ssdcache_cache_pool_up",
		// iostat's figures per device: utilisation, latency, IOPS, MB/s, queue depth.
		"ssdcache_disk_io_time_seconds_total", "ssdcache_disk_read_time_seconds_total", "ssdcache_disk_reads_completed_total",
		"ssdcache_disk_read_bytes_total", "ssdcache_disk_io_time_weighted_seconds_total",
		// The plugin's own cost.
		"process_cpu_seconds_total"} {
		if !used[want] {
			t.Errorf("dashboard does not show %s", want)
		}
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
